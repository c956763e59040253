#!/usr/bin/python3
"""Test-data writer for `.tet` tensor files (docs/specs/tet.md), our own code.

`write_tet(path, datasets, ...)` writes a layout-v1 file the way upstream's
writers do (superblock, dataset records, TIDX index, payloads, optional
THST footer), with knobs for the deviations readers must tolerate (payload
order, gaps, shuffled index, per-chunk codecs, spilled metadata). It returns
a `Layout` with the offsets of every part so tests can damage files on
purpose. `write_corpus(dir)` writes every case the tests use;
`--sample DIR` writes one small representative file for the demo.

Run with /usr/bin/python3 (numpy, zstandard).
"""
import argparse
import json
import os
import random
import struct
import sys
from dataclasses import dataclass, field

import numpy as np
import zstandard

DTYPES = {  # tag -> numpy dtype (spec §5.3)
    1: "<f4", 2: "<f8", 3: "<i4", 4: "<i8", 5: "|u1",
    6: "<u2", 7: "<i2", 8: "<u4", 9: "<f2", 10: "<u8",
}
TAG = {np.dtype(v).str: k for k, v in DTYPES.items()}


@dataclass
class Dataset:
    name: bytes
    array: np.ndarray
    chunks: tuple
    codec: object = "raw"   # "raw", "zstd", or a function (coords) -> "raw"/"zstd"
    dtype_tag: int = 0      # 0: from the array's dtype


@dataclass
class Layout:
    index_offset: int = 0
    entry_offsets: list = field(default_factory=list)   # file offset of each index entry
    entries: list = field(default_factory=list)         # dicts, in index order
    record_offsets: list = field(default_factory=list)
    footer_offset: int = 0


def grid_of(shape, chunks):
    return [-(-s // c) for s, c in zip(shape, chunks)]


def cells(grid):
    """Grid coordinates in row-major order, last axis fastest (§6.4)."""
    return [tuple(c) for c in np.ndindex(*grid)] if all(grid) else []


def tile_of(array, coords, chunks):
    sl = tuple(slice(c * k, (c + 1) * k) for c, k in zip(coords, chunks))
    return np.ascontiguousarray(array[sl])


def zstd_frame(data):
    # like upstream: no content size, no checksum
    return zstandard.ZstdCompressor(level=3, write_content_size=False,
                                    write_checksum=False).compress(data)


def record(ds):
    name = ds.name if isinstance(ds.name, bytes) else ds.name.encode()
    tag = ds.dtype_tag or TAG[ds.array.dtype.str]
    head = struct.pack("<IIII", len(name), tag, ds.array.ndim, 0) + name
    head += b"\0" * ((8 - len(head) % 8) % 8)
    return head + struct.pack(f"<{ds.array.ndim}Q", *ds.array.shape) + \
        struct.pack(f"<{ds.array.ndim}Q", *ds.chunks)


def write_tet(path, datasets, order="index", gap=0, shuffle_index=False,
              footer=None, spill=False, budget=(0, 0), seed=1, trailing=b""):
    """Writes `datasets` to `path`.

    order: "index" (back to back in index order), "reverse" or "shuffled"
    payload placement; gap: bytes of junk between payloads; shuffle_index:
    index entries in random order; footer: None or a dict with "history"
    and "metadata" (spill=True moves the metadata to a spill before the
    footer JSON, as upstream does for large metadata).
    """
    rng = random.Random(seed)
    blob = b"".join(record(d) for d in datasets)
    entries = []
    for did, ds in enumerate(datasets):
        for c in cells(grid_of(ds.array.shape, ds.chunks)):
            raw = tile_of(ds.array, c, ds.chunks).tobytes()
            codec = ds.codec(c) if callable(ds.codec) else ds.codec
            stored = zstd_frame(raw) if codec == "zstd" else raw
            entries.append(dict(dataset_id=did, coords=list(c), raw=len(raw),
                                stored=stored, codec=1 if codec == "zstd" else 0))
    index_off = 40 + len(blob) if datasets else 32
    index_len = 32 + 104 * len(entries) if datasets else 0
    place = list(range(len(entries)))
    if order == "reverse":
        place.reverse()
    elif order == "shuffled":
        rng.shuffle(place)
    pos = index_off + index_len
    payload = bytearray()
    for k in place:
        if gap and payload:
            payload += bytes(rng.randrange(256) for _ in range(gap))
        entries[k]["offset"] = pos + len(payload)
        payload += entries[k]["stored"]
    index_order = list(range(len(entries)))
    if shuffle_index:
        rng.shuffle(index_order)
    lay = Layout(index_offset=index_off)
    out = bytearray()
    flags = 1 if footer is not None else 0
    out += b"TETR" + struct.pack("<IIIQQ", 1, len(datasets), flags, index_off, index_len)
    if datasets:
        out += struct.pack("<Q", len(blob))
        at = 40
        for d in datasets:
            lay.record_offsets.append(at)
            at += len(record(d))
        out += blob
        out += b"TIDX" + struct.pack("<IQHHIQ", 1, len(entries), budget[0], 0, budget[1], 0)
        for k in index_order:
            e = entries[k]
            lay.entry_offsets.append(len(out))
            lay.entries.append(e)
            coords = e["coords"] + [0] * (8 - len(e["coords"]))
            out += struct.pack("<Q8QQQQII", e["dataset_id"], *coords, e["offset"], e["raw"],
                               len(e["stored"]), e["codec"], 0)
    out += payload
    out += trailing
    if footer is not None:
        body = {"history": footer.get("history", [])}
        meta = footer.get("metadata")
        if spill and meta is not None:
            spilled = json.dumps(meta, separators=(",", ":")).encode()
            body["metadata_ref"] = {"offset": len(out), "len": len(spilled)}
            out += spilled
        elif meta is not None:
            body["metadata"] = meta
        text = footer.get("raw_json") or json.dumps(body, separators=(",", ":")).encode()
        lay.footer_offset = len(out)
        out += text + struct.pack("<QI", len(text), 1) + b"THST"
    with open(path, "wb") as f:
        f.write(out)
    return lay


def c_order(ds):
    """The bytes a reader must serve for the dataset's .npy data."""
    return np.ascontiguousarray(ds.array).tobytes()


def zarr_chunk(ds, coords):
    """The zarr v2 chunk file: the tile zero-padded to min(chunks, shape)."""
    full = [max(1, min(c, s)) for c, s in zip(ds.chunks, ds.array.shape)]
    tile = tile_of(ds.array, coords, ds.chunks)
    out = np.zeros(full, dtype=ds.array.dtype)
    out[tuple(slice(0, n) for n in tile.shape)] = tile
    return out.tobytes()


def ramp(shape, dtype, seed=0):
    n = int(np.prod(shape))
    a = (np.arange(n, dtype=np.int64) * 7 + seed) % 251
    if np.dtype(dtype).kind == "f":
        return (a.astype(np.float64) / 4 - 20).astype(dtype).reshape(shape)
    if np.dtype(dtype).kind == "i":
        return (a - 100).astype(dtype).reshape(shape)
    return a.astype(dtype).reshape(shape)


def alternate(coords):
    return "zstd" if sum(coords) % 2 else "raw"


def corpus():
    """name -> (datasets, write_tet keyword arguments): the valid cases."""
    cases = {}
    for tag, dt in DTYPES.items():
        cases[f"dtype_{tag}"] = ([Dataset(b"x", ramp((5, 7), dt), (2, 3))], {})
    for rank in range(1, 9):
        shape = tuple([3, 2, 4, 1, 2, 3, 2, 2][:rank])
        chunks = tuple([2, 1, 3, 1, 2, 2, 1, 2][:rank])
        cases[f"rank_{rank}"] = ([Dataset(b"r", ramp(shape, "<i2", rank), chunks, alternate)], {})
    cases["zero_len"] = ([Dataset(b"empty", np.zeros((0, 5), "<f4"), (2, 2)),
                          Dataset(b"after", ramp((3,), "<u2"), (2,))], {})
    cases["mixed_shuffled_gaps"] = ([Dataset(b"m", ramp((9, 10, 3), "<f8"), (4, 3, 2), alternate)],
                                    dict(order="shuffled", gap=5, shuffle_index=True))
    cases["reverse"] = ([Dataset(b"v", ramp((6, 6), "<u4"), (4, 4), "zstd")], dict(order="reverse"))
    cases["zero_copy"] = ([Dataset(b"slabs", ramp((10, 4, 3), "<i4"), (3, 4, 3)),
                           Dataset(b"rows", ramp((1, 7, 5), "<u8"), (1, 2, 5))], {})
    cases["big_chunk"] = ([Dataset(b"one", ramp((3, 4), "<f4"), (8, 9))], {})
    meta = {"file": {"tool": "tet_writer.py", "created_at": "1700000000"},
            "datasets": {"t": {"attrs": {"units": "K", "long_name": "temperature"},
                               "dim_names": ["y", "x"],
                               "coords": {"x": {"labels": ["a", "b", "c"]}}}}}
    hist = [{"op": "write", "source": "tet_writer.py", "at": "1700000000"},
            {"op": "transform", "source": "q", "at": "1700000001", "parents": ["p1"],
             "params": {"k": "v"}},
            ["convert", "h5", "1"]]
    cases["footer"] = ([Dataset(b"t", ramp((4, 3), "<f4"), (2, 2), "zstd")],
                       dict(footer={"history": hist, "metadata": meta}, budget=(2500, 1 << 20)))
    cases["footer_spill"] = ([Dataset(b"t", ramp((4, 3), "<f4"), (2, 2))],
                             dict(footer={"history": hist, "metadata": meta}, spill=True))
    names = [b"group/sub/var", b"", b".", b"..", b"a\nb\x00c\x7f%", b"dup", b"dup",
             b"n.npy", b"n", b".zarray", b".zgroup", b".shardfs", "\u00e9t\u00e9".encode(),
             b"L" * 300, b"L" * 300, "\u00e9".encode() * 130, b"N" * 250, b"N" * 250,
             b"P" * 249] + [b"P" * 248] * 12
    cases["names"] = ([Dataset(n, ramp((2, 2), "|u1", i), (2, 1)) for i, n in enumerate(names)], {})
    # names that are paths nest as zarr groups; the others stay escaped at
    # the root (docs/formats/tet.md, Names); coordinate labels per group
    nested = [b"a/b/c", b"a/b/d", b"a/e", b"x", b"x/y", b"a//b", b"a/./b", b"g/.zarray",
              b"a/e", b"a/b.npy/z", b"a/b.npy", b"h/i%j", b"a/b/p"]
    nmeta = {"datasets": {
        "a/b/c": {"dim_names": ["p", "q"], "attrs": {"units": "m"},
                  "coords": {"p": {"labels": ["p0", "p1"]}, "q": {"labels": ["q0", "\u00e9t\u00e9"]}}},
        "a/b/d": {"dim_names": ["p", "r"], "coords": {"p": {"labels": ["p0", "p1"]}}},
        "a/e": {"dim_names": ["s", "t"], "coords": {"s": {"labels": ["only one"]}}},
        "x": {"dim_names": ["u", "v"], "coords": {"u": {"labels": ["1", "2"]}}},
        "x/y": {"dim_names": ["u", "w"], "coords": {"u": {"labels": ["3", "4"]}}}}}
    cases["nested"] = ([Dataset(n, ramp((2, 2), "<i2", i), (1, 2)) for i, n in enumerate(nested)],
                       dict(footer={"history": [], "metadata": nmeta}))
    cases["empty"] = ([], {})
    return cases


def write_corpus(outdir):
    """Writes every valid case; returns {file name: datasets}."""
    os.makedirs(outdir, exist_ok=True)
    out = {}
    for name, (dss, kw) in corpus().items():
        write_tet(os.path.join(outdir, name + ".tet"), dss, **kw)
        out[name + ".tet"] = dss
    return out


def write_sample(outdir):
    """One small representative file: two datasets, raw and zstd, edge
    tiles, footer metadata with dimension names."""
    os.makedirs(outdir, exist_ok=True)
    t = np.linspace(250, 300, 6 * 8, dtype="<f4").reshape(6, 8)
    mask = (np.arange(10) % 3 == 0).astype("|u1")
    meta = {"file": {"tool": "tet_writer.py"},
            "datasets": {"weather/temperature": {
                "attrs": {"units": "K"}, "dim_names": ["lat", "lon"],
                "coords": {"lat": {"labels": [f"{10 * i}N" for i in range(6)]},
                           "lon": {"labels": [f"{15 * i}E" for i in range(8)]}}}}}
    path = os.path.join(outdir, "weather.tet")
    write_tet(path, [Dataset(b"weather/temperature", t, (4, 3), "zstd"),
                     Dataset(b"mask", mask, (4,))],
              footer={"history": [{"op": "write", "source": "weather.tet", "at": "1700000000"}],
                      "metadata": meta})
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", metavar="DIR", help="write one small sample .tet into DIR")
    ap.add_argument("--corpus", metavar="DIR", help="write every test case into DIR")
    ap.add_argument("--big", metavar="FILE", help="write a 1 GiB zstd+raw dataset to FILE")
    a = ap.parse_args()
    if a.sample:
        print(write_sample(a.sample))
    if a.corpus:
        for name in write_corpus(a.corpus):
            print(os.path.join(a.corpus, name))
    if a.big:
        write_big(a.big)
        print(a.big)
    if not (a.sample or a.corpus or a.big):
        ap.print_help(sys.stderr)
        return 2
    return 0


def big_value(n):
    """The u32 element at C-order index n of the big dataset."""
    return (n * 2654435761) % (1 << 32)


def write_big(path, rows=16384, cols=16384, chunks=(1024, 1024)):
    """A 1 GiB u32 array (rows x cols) in raw and zstd tiles, streamed tile
    by tile so the writer itself stays small. Elements are big_value(C index)."""
    grid = grid_of((rows, cols), chunks)
    nent = grid[0] * grid[1]
    name = b"big"
    rec = struct.pack("<IIII", len(name), 8, 2, 0) + name
    rec += b"\0" * ((8 - len(rec) % 8) % 8) + struct.pack("<4Q", rows, cols, *chunks)
    index_off = 40 + len(rec)
    pos = index_off + 32 + 104 * nent
    cctx = zstandard.ZstdCompressor(level=1, write_content_size=False)
    with open(path, "wb") as f:
        f.write(b"TETR" + struct.pack("<IIIQQ", 1, 1, 0, index_off, 32 + 104 * nent))
        f.write(struct.pack("<Q", len(rec)) + rec)
        f.write(b"TIDX" + struct.pack("<IQHHIQ", 1, nent, 0, 0, 0, 0))
        f.seek(pos)  # payloads first; the index is filled in once sizes are known
        entries = []
        for (i, j) in cells(grid):
            r0, c0 = i * chunks[0], j * chunks[1]
            rr = np.arange(r0, min(r0 + chunks[0], rows), dtype=np.uint64)[:, None]
            cc = np.arange(c0, min(c0 + chunks[1], cols), dtype=np.uint64)[None, :]
            tile = ((rr * cols + cc) * np.uint64(2654435761) % np.uint64(1 << 32)).astype("<u4")
            raw = tile.tobytes()
            # every other tile raw: the dataset mixes codecs
            stored = cctx.compress(raw) if (i + j) % 2 else raw
            entries.append(struct.pack("<Q8QQQQII", 0, i, j, 0, 0, 0, 0, 0, 0, pos, len(raw),
                                       len(stored), 1 if (i + j) % 2 else 0, 0))
            f.write(stored)
            pos += len(stored)
        f.seek(index_off + 32)
        f.write(b"".join(entries))

if __name__ == "__main__":
    sys.exit(main())
