"""Corruption corpus: damaged copies of valid container files.

    corrupt.py [--seed N] [--max K] [--shardfs-cat PATH] OUTDIR INPUT...

Each INPUT is a container file (.tsumugi .tatami .tet .sidx), a taridx fold
(.taridx; its F_<S>.tar shards are taken along) or a Shardlake root (a
directory). Of the damages below, at most K variants per damaged file are
written (chosen with the seed), each a copy with exactly one change:

  trunc   truncation at every structural boundary (part starts and ends, the
          header and footer edges), one byte either side, and random points
  flip    single-bit flips in the header, the footer, each part's first
          bytes (descriptors, page and tar headers) and its payload
  huge    an offset, length or count stored in the file set to 2^64-1,
          2^32-1, 2^31-1 or the file's size
  overlap one part's stored offset replaced by another part's, so parts overlap
  text    (JSON side files) numbers made huge or negative, random cuts

Structural boundaries come from the file's own `.shardfs/info.json` (every
offset/length pair it reports), read with shardfs-cat when available, plus
tar header blocks and JSON tokens found by scanning. Single files are written
flat into OUTDIR as `<stem>~<tag>.<ext>` (beside each other, as a user would
have them); folds and roots as directories `<name>~<tag>/` holding a whole
copy of the set with one file damaged. Prints one line per variant:
`<relative path>\t<damaged file>\t<tag>`.
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

CONTAINERS = (".tsumugi", ".tatami", ".tet", ".sidx")
HUGE = (2**64 - 1, 2**32 - 1, 2**31 - 1)


def info_parts(cat, path):
    """(offset, end) spans the format module reports for the file, or []."""
    if not cat:
        return []
    try:
        out = subprocess.run([cat, str(path), ".shardfs/info.json"], capture_output=True,
                             timeout=60).stdout
        info = json.loads(out)
    except (subprocess.TimeoutExpired, ValueError):
        return []
    spans = []

    def walk(v):
        if isinstance(v, dict):
            for k, off in v.items():
                if "offset" not in k or not isinstance(off, int):
                    continue
                pre = k.replace("offset", "")
                for lk in (pre + "length", pre + "len", pre + "size", pre + "byte_len",
                           "stored_byte_len", "stored_length", "length", "size"):
                    if isinstance(v.get(lk), int):
                        spans.append((off, off + v[lk]))
                        break
                else:
                    spans.append((off, off))
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(info)
    return sorted(set(spans))


def tar_spans(data):
    """Header blocks of a tar: every 512-byte block with the ustar magic."""
    return [(o, o + 512) for o in range(0, len(data) - 511, 512)
            if data[o + 257:o + 262] == b"ustar"]


def flip(data, pos, rnd):
    b = bytearray(data)
    b[pos] ^= 1 << rnd.randrange(8)
    return bytes(b)


def encodings(v):
    out = []
    if v < 2**64:
        out.append(("<Q", struct.pack("<Q", v)))
    if v < 2**32:
        out.append(("<I", struct.pack("<I", v)))
    return out


def binary_variants(data, spans, rnd):
    n = len(data)
    v = []
    # truncation at every boundary, either side, and at random points
    cuts = {0, 1, n - 1}
    for a, b in spans:
        cuts |= {a - 1, a, a + 1, b - 1, b, b + 1}
    cuts |= {rnd.randrange(n) for _ in range(6)} if n else set()
    v += [("trunc%d" % c, data[:c]) for c in sorted(cuts) if 0 <= c < n]
    # bit flips by zone
    first = min((a for a, _ in spans if a > 0), default=min(64, n))
    last = max((b for _, b in spans if b <= n), default=max(n - 64, 0))
    zones = [("head", 0, max(first, 1)), ("tail", min(last, n - 1), n)]
    for a, b in spans:
        if a < b <= n:
            zones.append(("desc", a, min(b, a + 32)))
            zones.append(("payload", a, b))
    for name, a, b in zones:
        for _ in range(2):
            if 0 <= a < b <= n:
                p = rnd.randrange(a, b)
                v.append(("flip-%s%d" % (name, p), flip(data, p, rnd)))
    # stored offsets and lengths made huge, and parts made to overlap
    values = {a for a, _ in spans} | {b - a for a, b in spans} | {b for _, b in spans}
    for val in sorted(x for x in values if x >= 8):
        for fmt, enc in encodings(val):
            pos = data.find(enc)
            if pos < 0:
                continue
            for big in HUGE + (n,):
                if big < 2 ** (8 * struct.calcsize(fmt)):
                    rep = struct.pack(fmt, big)
                    v.append(("huge%d-%x" % (pos, big),
                              data[:pos] + rep + data[pos + len(rep):]))
            break
    offs = sorted({a for a, _ in spans if a >= 8})
    for x, y in zip(offs, offs[1:]):
        for fmt, enc in encodings(y):
            pos = data.find(enc)
            if pos >= 0:
                rep = struct.pack(fmt, x)
                v.append(("overlap%d" % pos, data[:pos] + rep + data[pos + len(rep):]))
                break
    return v


def text_variants(data, rnd):
    v = []
    n = len(data)
    for c in sorted({rnd.randrange(n) for _ in range(4)} if n else set()):
        v.append(("trunc%d" % c, data[:c]))
    for m in list(re.finditer(rb"-?\d+(\.\d+)?", data))[:12]:
        for rep in (b"18446744073709551616", b"-1", b"1e308"):
            v.append(("num%d-%s" % (m.start(), rep.decode()),
                      data[:m.start()] + rep + data[m.end():]))
    for _ in range(3):
        if n:
            p = rnd.randrange(n)
            v.append(("flip%d" % p, flip(data, p, rnd)))
    return v


def variants_for(path, cat, rnd, k):
    data = path.read_bytes()
    if path.suffix in (".json", ".jsonl"):
        v = text_variants(data, rnd)
    else:
        spans = info_parts(cat, path) if path.suffix in CONTAINERS + (".taridx",) else []
        if path.suffix == ".tar":
            spans = tar_spans(data)
        v = binary_variants(data, spans, rnd)
    # one variant per distinct content
    seen, uniq = {data}, []
    for tag, d in v:
        if d not in seen:
            seen.add(d)
            uniq.append((tag, d))
    return rnd.sample(uniq, k) if len(uniq) > k else uniq


def units(inp):
    """(name, base dir, files of the set, files to damage) for an input."""
    inp = Path(inp)
    if inp.is_dir():
        files = sorted(p for p in inp.rglob("*") if p.is_file())
        targets = [p for p in files if p.suffix in (".sidx", ".json")]
        return inp.name, inp, files, targets
    if inp.suffix == ".taridx":
        fold = inp.stem
        shards = sorted(p for p in inp.parent.glob(fold + "_*.tar")
                        if "_" not in p.name[len(fold) + 1:-4])
        files = [inp] + shards
        return fold, inp.parent, files, files
    return None, inp.parent, [inp], [inp]


def generate(out, inputs, seed=1, k=40, cat=None):
    rnd = random.Random(seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for inp in map(Path, inputs):
        name, base, files, targets = units(inp)
        for t in targets:
            for tag, d in variants_for(t, cat, rnd, k):
                if name is None:  # a single file: flat, beside the others
                    rel = "%s~%s%s" % (t.stem, tag, t.suffix)
                    (out / rel).write_bytes(d)
                    made.append((rel, rel, tag))
                    continue
                # the damaged file's own name (minus dots) keeps variant names unique
                rel = "%s~%s-%s" % (name, re.sub(r"\W", "_", t.name), tag)
                dst = out / rel
                for f in files:
                    to = dst / f.relative_to(base) if inp.is_dir() else dst / f.name
                    to.parent.mkdir(parents=True, exist_ok=True)
                    if f == t:
                        to.write_bytes(d)
                    else:
                        shutil.copyfile(f, to)
                damaged = (dst / (t.relative_to(base) if inp.is_dir() else t.name))
                made.append((rel, str(damaged.relative_to(out)), tag))
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max", type=int, default=40, help="variants per damaged file")
    ap.add_argument("--shardfs-cat", help="shardfs-cat, to learn part boundaries")
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+")
    a = ap.parse_args()
    for rel, damaged, tag in generate(a.out, a.inputs, a.seed, a.max, a.shardfs_cat):
        print(f"{rel}\t{damaged}\t{tag}")


if __name__ == "__main__":
    sys.exit(main())
