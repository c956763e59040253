"""The benchmark's data, generated on the spot and kept in a work directory
between runs (each data set is rebuilt only when its parameters change).

Tar folds are written here with Python's tarfile (the taridx test writer
makes small fixtures only) and indexed with the project's own
`shardfs-taridx`; .tet files come from tests/writers/tet_writer.py."""
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "writers"))
import tet_writer  # noqa: E402  (the project's writer, found through the path above)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def _fresh(d, params):
    """True when `d` already holds the data made with `params`."""
    stamp = d / "params.json"
    if stamp.exists() and json.loads(stamp.read_text()) == params:
        return True
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return False


def _stamp(d, params):
    (d / "params.json").write_text(json.dumps(params))


class _Pool:
    """Member contents: slices of one random buffer, so generating a million
    members costs no more than writing them."""

    def __init__(self, rng, size=64 * MiB, buf=None):
        self.buf = rng.randbytes(size) if buf is None else buf
        self.rng = rng

    def take(self, n):
        at = self.rng.randrange(0, len(self.buf) - n)
        return self.buf[at:at + n]


def _write_tar(path, members):
    """members: (name, bytes) pairs, written as USTAR like upstream's writer."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, payload in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(payload)
            ti.mtime = 1700000000
            ti.mode = 0o644
            tf.addfile(ti, _Reader(payload))


class _Reader:
    """The file object tarfile.addfile wants, over bytes without a copy."""

    def __init__(self, b):
        self.mv, self.at = memoryview(b), 0

    def read(self, n=-1):
        end = len(self.mv) if n < 0 else self.at + n
        out = self.mv[self.at:end]
        self.at += len(out)
        return out


def index_fold(tools, d, fold):
    subprocess.run([str(tools / "shardfs-taridx"), "--quiet", str(d), fold], check=True)


def small_fold(root, tools, members, shards, lo=1 * KiB, hi=16 * KiB, native=True):
    """A fold `f` of `members` flat members `<key>.bin` of lo..hi bytes in
    `shards` tars, plus (if `native`) the same files extracted into
    `native/` and an uncompressed squashfs image of them. Returns
    (src dir, native dir, squashfs image, member names in key order)."""
    params = dict(kind="small", members=members, shards=shards, lo=lo, hi=hi, native=native, v=1)
    d = Path(root) / f"fold-{members}-{lo}-{hi}"
    names = [f"s{i:07d}.bin" for i in range(members)]
    src, nat, img = d / "src", d / "native", d / "native.sqfs"
    if _fresh(d, params):
        return src, nat, img, names
    src.mkdir()
    rng = random.Random(members)
    pool = _Pool(rng)
    per = -(-members // shards)
    if native:
        nat.mkdir()
    for s in range(shards):
        batch = [(n, pool.take(rng.randint(lo, hi))) for n in names[s * per:(s + 1) * per]]
        _write_tar(src / f"f_{s:04d}.tar", batch)
        for n, b in batch if native else ():
            (nat / n).write_bytes(b)
    index_fold(tools, src, "f")
    if native:
        subprocess.run(["mksquashfs", str(nat), str(img), "-noappend", "-no-progress", "-quiet",
                        "-noI", "-noD", "-noF", "-noX"], check=True, stdout=subprocess.DEVNULL)
    _stamp(d, params)
    return src, nat, img, names


def lone_tar(root, members, lo=16, hi=64):
    """One tar `t.tar` with no index, of `members` flat members
    `<key>.bin` of lo..hi bytes (an unindexed tar, issue 27). Returns the src
    dir."""
    params = dict(kind="lone", members=members, lo=lo, hi=hi, v=1)
    d = Path(root) / f"lone-{members}-{lo}-{hi}"
    src = d / "src"
    if _fresh(d, params):
        return src
    src.mkdir()
    rng = random.Random(members)
    pool = _Pool(rng)
    _write_tar(src / "t.tar", ((f"s{i:07d}.bin", pool.take(rng.randint(lo, hi))) for i in range(members)))
    _stamp(d, params)
    return src


def jpeg_fold(root, tools, samples, shards, side=256):
    """A fold `j` of `samples` samples `<key>.jpg` (a side x side JPEG made
    with PIL: smooth colour fields plus noise, about 20-30 KiB at quality
    90) and `<key>.cls` in `shards` tars, plus the same files extracted into
    `native/`. Returns (src dir, native dir, keys in order)."""
    from PIL import Image
    params = dict(kind="jpeg", samples=samples, shards=shards, side=side, v=1)
    d = Path(root) / f"jpeg-{samples}-{side}"
    keys = [f"img{i:06d}" for i in range(samples)]
    src, nat = d / "src", d / "native"
    if _fresh(d, params):
        return src, nat, keys
    src.mkdir()
    nat.mkdir()
    rng = np.random.default_rng(samples)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side
    per = -(-samples // shards)
    for s in range(shards):
        batch = []
        for k in keys[s * per:(s + 1) * per]:
            a, b, c = rng.random(3, dtype=np.float32)
            field = np.stack([xx * a, yy * b, (xx + yy) * c / 2], axis=-1) * 200
            noise = rng.integers(0, 40, size=(side, side, 3), dtype=np.uint8)
            img = Image.fromarray((field + noise).clip(0, 255).astype(np.uint8))
            out = io.BytesIO()
            img.save(out, format="JPEG", quality=90)
            batch += [(f"{k}.jpg", out.getvalue()), (f"{k}.cls", str(int(rng.integers(10))).encode())]
        _write_tar(src / f"j_{s:04d}.tar", batch)
        for n, b in batch:
            (nat / n).write_bytes(b)
    index_fold(tools, src, "j")
    _stamp(d, params)
    return src, nat, keys


def big_member(root, tools, size):
    """A fold `big` whose one member `payload.bin` is `size` bytes of random
    data. Returns (src dir, member name, byte offset of the payload in
    big_0000.tar)."""
    params = dict(kind="big", size=size, v=1)
    d = Path(root) / f"big-{size}"
    src = d / "src"
    if not _fresh(d, params):
        src.mkdir()
        rng = np.random.default_rng(3)
        ti = tarfile.TarInfo("payload.bin")
        ti.size, ti.mtime = size, 1700000000
        with open(src / "big_0000.tar", "wb") as f:
            f.write(ti.tobuf(format=tarfile.USTAR_FORMAT))
            for at in range(0, size, 64 * MiB):
                f.write(rng.bytes(min(64 * MiB, size - at)))
            f.write(b"\0" * ((-size) % 512 + 1024))
        index_fold(tools, src, "big")
        _stamp(d, params)
    return src, "payload.bin", 512


def sparse_tar(root, size):
    """An unindexed tar `holes.tar` (no index) written by GNU tar --sparse with
    `hole.bin`, a hole of `size` bytes then 4 KiB of data, and
    `stored.bin`, `size` bytes of random data stored as they are. Returns
    the src dir."""
    params = dict(kind="sparse", size=size, v=1)
    d = Path(root) / f"sparse-{size}"
    src, files = d / "src", d / "files"
    if not _fresh(d, params):
        src.mkdir()
        files.mkdir()
        rng = np.random.default_rng(5)
        with open(files / "hole.bin", "wb") as f:
            f.seek(size)
            f.write(rng.bytes(4 * KiB))
        with open(files / "stored.bin", "wb") as f:
            for at in range(0, size, 64 * MiB):
                f.write(rng.bytes(min(64 * MiB, size - at)))
        subprocess.run(["tar", "--sparse", "-cf", str(src / "holes.tar"), "hole.bin", "stored.bin"],
                       cwd=files, check=True)
        shutil.rmtree(files)
        _stamp(d, params)
    return src


def many_datasets_tet(root, n, groups):
    """A .tet file `many.tet` of `n` small float32 datasets named
    `grp<i % groups>/var<i>` (nested zarr groups in the view), each with
    dimension names and coordinate labels as converters write them.
    Returns the src dir."""
    params = dict(kind="many", n=n, groups=groups, v=1)
    d = Path(root) / f"many-{n}x{groups}"
    src = d / "src"
    if not _fresh(d, params):
        src.mkdir()
        dss, meta = [], {}
        for i in range(n):
            name = f"grp{i % groups}/var{i}"
            dss.append(tet_writer.Dataset(name.encode(), tet_writer.ramp((4, 6), "<f4", i),
                                          (2, 3)))
            meta[name] = {"attrs": {"units": "K"}, "dim_names": ["y", "x"],
                          "coords": {"x": {"labels": [f"x{k}" for k in range(6)]}}}
        tet_writer.write_tet(str(src / "many.tet"), dss,
                             footer={"history": [], "metadata": {"datasets": meta}})
        _stamp(d, params)
    return src


def zstd_tet(root, chunks, chunk_bytes=8 * MiB):
    """A .tet file `z.tet` with one float32 dataset `x` of `chunks` zstd
    chunks of `chunk_bytes` each (one row of chunks). The values are smooth
    noise, so the frames compress about 2:1 like real tensors. Returns the
    src dir."""
    params = dict(kind="zstd", chunks=chunks, chunk_bytes=chunk_bytes, v=1)
    d = Path(root) / f"zstd-{chunks}x{chunk_bytes}"
    src = d / "src"
    if not _fresh(d, params):
        src.mkdir()
        rows = 1024
        cols = chunk_bytes // 4 // rows
        rng = np.random.default_rng(5)
        a = np.cumsum(rng.standard_normal((rows, cols * chunks), dtype=np.float32), axis=1)
        a = (np.round(a * 16) / 16).astype("<f4")
        tet_writer.write_tet(str(src / "z.tet"),
                             [tet_writer.Dataset(b"x", a, (rows, cols), codec="zstd")])
        _stamp(d, params)
    return src


def many_containers(root, count):
    """A SRC with `count` small .tet files (copies of the tet writer's
    sample under different names). Returns the src dir."""
    params = dict(kind="many", count=count, v=1)
    d = Path(root) / f"many-{count}"
    src = d / "src"
    if not _fresh(d, params):
        src.mkdir()
        tmp = d / "sample"
        tmp.mkdir()
        one = Path(tet_writer.write_sample(str(tmp)))
        blob = one.read_bytes()
        for i in range(count):
            (src / f"c{i:05d}.tet").write_bytes(blob)
        shutil.rmtree(tmp)
        _stamp(d, params)
    return src


def many_tars(root, count):
    """A SRC with `count` small tars and no index (an unindexed tar each, issue
    27): one member of 1 KiB in each. Returns the src dir."""
    params = dict(kind="manytars", count=count, v=1)
    d = Path(root) / f"manytars-{count}"
    src = d / "src"
    if not _fresh(d, params):
        src.mkdir()
        _write_tar(d / "one.tar", [("member.bin", bytes(range(256)) * 4)])
        blob = (d / "one.tar").read_bytes()
        for i in range(count):
            (src / f"t{i:05d}.tar").write_bytes(blob)
        _stamp(d, params)
    return src


def warm(paths):
    """Reads files once so their bytes are in the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 * MiB):
                pass


# The compressed tars of the ztar group: (format, file name in its SRC,
# the command that makes it from the tar on stdin). zstd -T2 and xz -T2
# with --block-size write many independently decodable frames or blocks,
# pbzip2 many streams; gzip, pigz and lz4 one stream each.
ZTAR_FORMATS = (
    ("gzip", "z.tar.gz", ["gzip", "-c"]),
    ("pigz", "z.tar.gz", ["pigz", "-p", "2", "-c"]),
    ("zstd", "z.tar.zst", ["zstd", "-T2", "-q", "-c"]),
    ("xz", "z.tar.xz", ["xz", "-T2", "--block-size=8MiB", "-c"]),
    ("pbzip2", "z.tar.bz2", ["pbzip2", "-p2", "-c"]),
    ("lz4", "z.tar.lz4", ["lz4", "-q", "-c"]),
)


def _text_pool(rng, size):
    """`size` bytes of words (compresses 3-4:1, like logs or JSON)."""
    words = np.array([("w%x" % (i * 2654435761 % 65536)).encode() for i in range(2048)] +
                     [b"the", b"of", b"and", b"a", b"to", b"in", b"is", b"\n"] * 64)
    picks = words[rng.integers(0, len(words), size=size // 3)]
    return (b" ".join(picks.tolist()) * 2)[:size]


def compressed_tars(root, members, large, lo=20_000, hi=150_000):
    """One tar of `members` members `m<i>.bin` of lo..hi bytes and one
    `large.bin` of `large` bytes (in the middle), each half random bytes and
    half text (alternating 1 MiB in the large one), compressed by each tool
    of ZTAR_FORMATS into its own SRC. Returns (dir, {format: (src dir,
    archive name)}, {member name: size}, size of the tar)."""
    params = dict(kind="ztar", members=members, large=large, lo=lo, hi=hi,
                  formats=[f[2] for f in ZTAR_FORMATS], v=1)
    d = Path(root) / f"ztar-{members}-{large}"
    srcs = {f: (d / f, name) for f, name, _ in ZTAR_FORMATS}
    if _fresh(d, params):
        return d, srcs, json.loads((d / "members.json").read_text()), (d / "z.tar").stat().st_size
    rng = random.Random(members)
    npr = np.random.default_rng(members)
    # random bytes made fresh, so no compressor finds them twice
    text = _Pool(rng, buf=_text_pool(npr, 32 * MiB))

    def mixed(n):
        half = n // 2
        return npr.bytes(half) + text.take(n - half)

    sizes = {f"m{i:05d}.bin": rng.randint(lo, hi) for i in range(members)}
    names = list(sizes)
    sizes["large.bin"] = large
    order = names[:members // 2] + ["large.bin"] + names[members // 2:]

    def payload(n):
        if n != "large.bin":
            return mixed(sizes[n])
        step = MiB
        return b"".join(npr.bytes(min(step, large - at)) if (at // step) % 2 == 0 else
                        text.take(min(step, large - at)) for at in range(0, large, step))
    _write_tar(d / "z.tar", ((n, payload(n)) for n in order))
    for f, name, cmd in ZTAR_FORMATS:
        (d / f).mkdir()
        with open(d / "z.tar", "rb") as i, open(d / f / name, "wb") as o:
            subprocess.run(cmd, stdin=i, stdout=o, check=True)
    (d / "members.json").write_text(json.dumps(sizes))
    _stamp(d, params)
    return d, srcs, sizes, (d / "z.tar").stat().st_size
