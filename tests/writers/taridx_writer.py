#!/usr/bin/python3
"""Test-data writer for iTar folds (docs/specs/taridx.md), our own code.

`write_fold(dir, fold, samples, ...)` writes `<fold>_<NNNN>.tar` shards of
plain ustar members `<key>.<ext>` and `<fold>.taridx` the way upstream's
fold writer does: crash ids for XXH64 collisions, extension ids in
first-seen order, n_stems and the contiguity flag. It returns the rows so
tests can compute what the view must show. `write_scale(dir, members)`
writes a fold of many small members across many shards quickly;
`--sample DIR` writes one small representative fold for the demo.

Run with /usr/bin/python3 (xxhash).
"""
import argparse
import os
import struct
import sys

import xxhash

BLOCK = 512
ROW = struct.Struct("<HQQHIQ")


def ustar_header(name: bytes, size: int, typeflag: bytes = b"0", linkname: bytes = b"",
                 prefix: bytes = b"") -> bytes:
    """One POSIX ustar header block with a valid checksum."""
    assert len(name) <= 100 and len(prefix) <= 155
    h = bytearray(BLOCK)
    h[0:len(name)] = name
    h[100:108] = b"0000644\0"
    h[108:116] = b"0000000\0"
    h[116:124] = b"0000000\0"
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"%011o\0" % 1767225600
    h[148:156] = b" " * 8
    h[156:157] = typeflag
    h[157:157 + len(linkname)] = linkname
    h[257:265] = b"ustar\x0000"
    h[345:345 + len(prefix)] = prefix
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


def member(name: bytes, data: bytes, **kw) -> bytes:
    return ustar_header(name, len(data), **kw) + data + b"\0" * (-len(data) % BLOCK)


def end_of_archive(size: int) -> bytes:
    """Two zero blocks, then zeros up to a multiple of 10240 bytes."""
    total = size + 2 * BLOCK
    return b"\0" * (2 * BLOCK + (-total % 10240))


def stem_ext(name: bytes):
    """Stem and extension as upstream derives them from a header name."""
    base = name.decode("utf-8", "replace").rsplit("/", 1)[-1]
    stem, dot, ext = base.partition(".")
    return stem, ext.lower()


class IndexState:
    """What upstream's writer keeps while writing a fold."""

    def __init__(self):
        self.canon = {}      # keyhash -> first stem seen
        self.crash = {}      # crash stem -> id
        self.ext2id = {}
        self.rows = []       # (fid, offset, size, extid, crashid, keyhash)
        self.stems = set()

    def add(self, fid, offset, size, stem, ext):
        h = xxhash.xxh64_intdigest(stem.encode())
        crashid = 0
        if self.canon.setdefault(h, stem) != stem:
            crashid = self.crash.setdefault(stem, len(self.crash) + 1)
        extid = self.ext2id.setdefault(ext, len(self.ext2id))
        self.stems.add(stem)
        self.rows.append((fid, offset, size, extid, crashid, h))

    def encode(self) -> bytes:
        ext = "\n".join(self.ext2id).encode()
        crash = "\n".join(self.crash).encode()
        runs = sum(1 for i, r in enumerate(self.rows)
                   if i == 0 or r[5] != self.rows[i - 1][5] or r[4] != self.rows[i - 1][4])
        flags = 1 if runs == len(self.stems) else 0
        hdr = struct.pack("<8sHHHHQQIIQQB7s", b"TARIDX\0\0", 1, 0, 32, 64, len(self.stems),
                          len(self.rows), len(self.ext2id), len(self.crash), 64 + len(ext),
                          64 + len(ext) + len(crash), flags, b"\0" * 7)
        return hdr + ext + crash + b"".join(ROW.pack(*r) for r in self.rows)


def write_fold(dirpath, fold, samples, shard_maxfiles=100000, start=0, pattern="%04d"):
    """Writes samples [(key, {ext: bytes})] as a fold; returns the rows as
    dicts (fid, tar, offset, size, name, data)."""
    os.makedirs(dirpath, exist_ok=True)
    st = IndexState()
    out = []
    shard, buf, nfiles, fid = start, bytearray(), 0, 0

    def flush():
        buf.extend(end_of_archive(len(buf)))
        with open(os.path.join(dirpath, f"{fold}_{pattern % shard}.tar"), "wb") as f:
            f.write(buf)

    for key, parts in samples:
        if nfiles >= shard_maxfiles:
            flush()
            shard, buf, nfiles, fid = shard + 1, bytearray(), 0, fid + 1
        for ext, data in parts.items():
            name = f"{key}.{ext}".encode()
            st.add(fid, len(buf), len(data), *stem_ext(name))
            out.append(dict(fid=fid, tar=f"{fold}_{pattern % shard}.tar", offset=len(buf),
                            size=len(data), name=name, data=data))
            buf.extend(member(name, data))
        nfiles += 1
    flush()
    with open(os.path.join(dirpath, f"{fold}.taridx"), "wb") as f:
        f.write(st.encode())
    return out


def scale_payload(i: int) -> bytes:
    return b"member %d\n" % i


def write_scale(dirpath, members=1_000_000, per_shard=50_000, fold="big"):
    """A fold of `members` small members `<8 digits>.txt` across shards of
    `per_shard` members, written with precomputed headers for speed. The
    payload of member i is scale_payload(i)."""
    os.makedirs(dirpath, exist_ok=True)
    template = bytearray(ustar_header(b"", 0))
    template[148:156] = b" " * 8
    base_sum = sum(template) - sum(template[124:136])
    rows = bytearray()
    ext = b"txt"
    nshards = (members + per_shard - 1) // per_shard
    for s in range(nshards):
        buf = bytearray()
        for i in range(s * per_shard, min(members, (s + 1) * per_shard)):
            key = b"%08d" % i
            data = scale_payload(i)
            h = bytearray(template)
            name = key + b".txt"
            h[0:len(name)] = name
            h[124:136] = b"%011o\0" % len(data)
            h[148:156] = b"%06o\0 " % (base_sum + sum(name) + sum(h[124:136]))
            rows += ROW.pack(s, len(buf), len(data), 0, 0, xxhash.xxh64_intdigest(key))
            buf += h
            buf += data
            buf += b"\0" * (-len(data) % BLOCK)
        buf += end_of_archive(len(buf))
        with open(os.path.join(dirpath, f"{fold}_{s:04d}.tar"), "wb") as f:
            f.write(buf)
    hdr = struct.pack("<8sHHHHQQIIQQB7s", b"TARIDX\0\0", 1, 0, 32, 64, members, members, 1, 0,
                      64 + len(ext), 64 + len(ext), 1, b"\0" * 7)
    with open(os.path.join(dirpath, f"{fold}.taridx"), "wb") as f:
        f.write(hdr + ext + rows)


def sample_samples(n=12):
    for i in range(n):
        yield f"{i:06d}", {"txt": b"caption of sample %d\n" % i, "cls": b"%d" % (i % 3)}


def write_sample(outdir):
    """A small fold `demo` of 12 samples (txt + cls) in two shards."""
    return write_fold(outdir, "demo", sample_samples(), shard_maxfiles=6)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", metavar="OUTDIR", help="write the demo fold")
    ap.add_argument("--scale", metavar="OUTDIR", help="write the 1,000,000-member fold")
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--per-shard", type=int, default=50_000)
    a = ap.parse_args(argv)
    if a.sample:
        write_sample(a.sample)
    if a.scale:
        write_scale(a.scale, a.members, a.per_shard)
    if not (a.sample or a.scale):
        ap.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
