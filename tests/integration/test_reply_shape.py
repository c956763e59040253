"""Answers gathered from thousands of tiny pieces (issue 15): a kernel's
writev takes at most IOV_MAX (1,024) pieces, and a reply that could not be
written left its reader waiting forever. Views made of thousands of pieces,
in every format that makes them (a taridx member or row and a Shardlake
array are one or two pieces), are read with READ requests of 1 MiB and
of other sizes at odd offsets (O_DIRECT, so each read reaches the daemon as
asked), and through the page cache, and compared with bytes computed from
what the writers put in."""
import base64
import json
import os
import struct
import sys

import numpy as np

from conftest import WRITERS, read_through

sys.path.insert(0, str(WRITERS))
import tatami_writer as tatw  # noqa: E402
import tet_writer as tetw  # noqa: E402
import tsumugi_writer as tsw  # noqa: E402

GROUPS, GROUP_ROWS = 1100, 100       # the reproducer
DOCS = 5000
TILES, TILE = 3000, 4                # a 1-D tet dataset in 3,000 tiny tiles

# (request size, first offset): 1 MiB requests as a loader's large reads,
# and smaller and unaligned ones
READS = [(1 << 20, 0), (1 << 20, 3), (128 << 10, 4097), (65537, 1), (4096, 0)]


def direct_read(path, size, start):
    """The file from `start` on, in READ requests of exactly `size` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        out, off = [], start
        while True:
            b = os.pread(fd, size, off)
            if not b:
                return b"".join(out)
            out.append(b)
            off += len(b)
    finally:
        os.close(fd)


def check(path, want):
    assert os.stat(path).st_size == len(want), path
    for size, start in READS:
        got = direct_read(path, size, start)
        assert got == want[start:], (path, size, start)
    assert read_through(path) == want, path


def test_tatami_1100_row_groups(mount, tmp_path):
    n = GROUPS * GROUP_ROWS
    ints = [None if i % 7 == 3 else (i * 2654435761) % (1 << 31) - (1 << 30) for i in range(n)]
    strs = [None if i % 11 == 5 else "s%x" % (i % 97) for i in range(n)]
    cols = [dict(name="v", type="int32", flags=1, values=ints, codecs=[tatw.NONE, tatw.ZSTD]),
            dict(name="s", type="string", flags=1, values=strs, codecs=[tatw.ZSTD, tatw.NONE])]
    tatw.write_file(tmp_path / "big.tatami", cols, [GROUP_ROWS] * GROUPS, GROUP_ROWS)
    mnt = mount(tmp_path)
    col = mnt / "big" / "columns"

    check(col / "v" / "valid.bin", bytes(v is not None for v in ints))
    values = struct.pack("<%di" % n, *(v or 0 for v in ints))
    check(col / "v" / "values.bin", values)
    npy = read_through(col / "v" / "values.npy")
    assert npy.endswith(values)
    check(col / "v" / "values.npy", npy)
    assert np.load(col / "v" / "values.npy").tolist() == [v or 0 for v in ints]

    data = b"".join(s.encode() for s in strs if s is not None)
    offsets, at = [0], 0
    for s in strs:
        at += len(s) if s is not None else 0
        offsets.append(at)
    check(col / "s" / "data.bin", data)
    check(col / "s" / "offsets.bin", struct.pack("<%dQ" % (n + 1), *offsets))

    for name, vals in (("v", ints), ("s", strs)):
        text = read_through(col / name / "values.jsonl")
        assert [json.loads(x) for x in text.decode().splitlines()] == vals
        check(col / name / "values.jsonl", text)
    rows = read_through(mnt / "big" / "rows.jsonl")
    assert [json.loads(x) for x in rows.decode().splitlines()] == \
        [{"v": a, "s": b} for a, b in zip(ints, strs)]
    check(mnt / "big" / "rows.jsonl", rows)
    assert (mnt / ".shardfs" / "errors").read_text() == ""


def test_tsumugi_5000_short_documents(mount, tmp_path):
    urls = [b"u%d" % d for d in range(DOCS)]
    titles = [b"" if d % 3 == 0 else b"t" * (d % 5) for d in range(DOCS)]
    raw = [bytes([d % 256]) * (d % 3) for d in range(DOCS)]
    cols = [(b"url", 1, 0, 0, urls), (b"title", 1, 1, 0, titles), (b"raw", 4, 0, 0, raw)]
    data, _ = tsw.shard([dict(kind=2, raw=tsw.forward_region(cols, DOCS))], DOCS, node_base=40)
    (tmp_path / "short.tsumugi").write_bytes(data)
    mnt = mount(tmp_path)
    want = b"".join(
        json.dumps({"id": 40 + d, "url": urls[d].decode(), "title": titles[d].decode(),
                    "raw": base64.b64encode(raw[d]).decode()}, separators=(",", ":")).encode()
        + b"\n" for d in range(DOCS))
    got = read_through(mnt / "short" / "docs.jsonl")
    # compare as objects first (key order and spacing are the view's), then bytes
    assert [json.loads(x) for x in got.splitlines()] == [json.loads(x) for x in want.splitlines()]
    check(mnt / "short" / "docs.jsonl", got)
    assert (mnt / ".shardfs" / "errors").read_text() == ""


def test_tet_3000_tiny_tiles(mount, tmp_path):
    arr = tetw.ramp((TILES * TILE,), "<i4", seed=5)
    ds = tetw.Dataset(b"a", arr, (TILE,), codec=lambda c: "zstd" if c[0] % 3 == 0 else "raw")
    tetw.write_tet(tmp_path / "tiny.tet", [ds], order="shuffled")
    mnt = mount(tmp_path)
    npy = mnt / "tiny" / "a.npy"
    got = read_through(npy)
    assert got.endswith(tetw.c_order(ds))
    assert np.array_equal(np.load(npy), arr)
    check(npy, got)
    assert (mnt / ".shardfs" / "errors").read_text() == ""
