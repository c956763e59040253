"""Mounted tests of the tet view (docs/design.md §3.9, docs/specs/tet.md): the upstream
fixtures against EXPECTED.json, the writer's corpus (every dtype, rank 1..8,
zero-length axes, mixed codecs, shuffled and gapped payloads, hostile
names, footers), real clients (numpy.load with mmap, zarr.open), bad input,
and memory while reading a 1 GiB dataset. Expected values are computed here
from the arrays the writer stored, never from the view."""
import errno
import hashlib
import json
import os
import shutil
import struct
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import xxhash
import xarray as xr
import zarr
import zstandard

from conftest import FIXTURES, WRITERS, mount_stats, read_through

sys.path.insert(0, str(WRITERS))
import tet_writer as tw  # noqa: E402

EXPECTED = json.loads((FIXTURES / "tet" / "EXPECTED.json").read_text())


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---- names as docs/design.md §3.3 and §3.9 say, computed independently ----------

def escape(raw, limit=250):
    parts = []
    for b in raw:
        parts.append(f"%{b:02X}".encode() if b in b"%/\\" or b < 0x20 or b == 0x7F else bytes([b]))
    out = b"".join(parts)
    if len(out) > limit:
        cut, n = b"", 0
        for p in parts:
            if n + len(p) > 200:
                break
            cut += p
            n += len(p)
        out = cut + b"~" + f"{xxhash.xxh64_intdigest(raw):016x}".encode()
    return out


RESERVED = {b"", b".", b"..", b".zgroup", b".zattrs", b".zarray", b".zmetadata", b".shardfs"}


def plain(c):
    """An entry name as it is (docs/formats/tet.md, Names)."""
    return (0 < len(c) <= 250 and c not in RESERVED
            and not any(b in b"/%\\" or b < 0x20 or b == 0x7F for b in c))


def unique(taken, base, raw):
    """base made unique in a group's taken names with #<n>; a name #<n>
    takes past 250 bytes takes its cut form first."""
    def free(n):
        return n not in RESERVED and n not in taken and n + b".npy" not in taken
    name, k = base, 0
    while not free(name):
        k += 1
        name = base + b"#%d" % k
        if len(name) > 250:
            base = escape(raw, limit=0)
            name, k = base, 0
    return name


class Layout:
    """Where a view puts each dataset, computed from the names, shapes and
    footer metadata alone (docs/formats/tet.md, Names and Coordinates):
    paths (None: not shown), groups, dims (each dataset's
    _ARRAY_DIMENSIONS) and coords (path of a coordinate array -> labels)."""

    def __init__(self, names, shapes=None, meta=None, shown=None):
        shapes = shapes or [()] * len(names)
        shown = [True] * len(names) if shown is None else shown
        dsmeta = (meta or {}).get("datasets", {})
        full = {n for n, ok in zip(names, shown) if ok}

        def comps(n):
            c = n.split(b"/")
            if len(c) < 2 or len(c) > 32 or not all(plain(x) for x in c):
                return None
            if any(b"/".join(c[:j]) in full for j in range(1, len(c))):
                return None
            return c
        taken = {(): set()}
        for n, ok in zip(names, shown):
            c = comps(n) if ok else None
            for j in range(1, len(c) if c else 0):
                taken.setdefault(tuple(c[:j]), set())
                taken[tuple(c[:j - 1])].add(c[j - 1])
        self.paths, self.dims = [], []
        phony, cand = {}, {}
        for n, shape, ok in zip(names, shapes, shown):
            if not ok:
                self.paths.append(None)
                self.dims.append(None)
                continue
            c = comps(n)
            g, leaf = (tuple(c[:-1]), c[-1]) if c else ((), n)
            entry = unique(taken[g], escape(leaf), leaf)
            taken[g].update({entry, entry + b".npy"})
            self.paths.append(b"/".join(g + (entry,)).decode())
            m = dsmeta.get(n.decode("utf-8", "replace"), {})
            names_ = m.get("dim_names")
            if not (isinstance(names_, list) and len(names_) == len(shape)
                    and len(set(names_)) == len(shape)):
                names_ = []
                for d, size in enumerate(shape):
                    key = (g, size, list(shape[:d]).count(size))
                    phony.setdefault(key, sum(1 for k in phony if k[0] == g))
                    names_.append(f"phony_dim_{phony[key]}")
            else:
                for d, dim in enumerate(names_):
                    labels = m.get("coords", {}).get(dim, {}).get("labels")
                    if labels is not None and len(labels) == shape[d]:
                        had = cand.setdefault((g, dim), labels)
                        if had != labels:
                            cand[(g, dim)] = None
            self.dims.append(names_)
        self.coords = {}
        for (g, dim), labels in cand.items():
            raw = dim.encode()
            if labels is not None and plain(raw) and unique(taken[g], raw, raw) == raw:
                self.coords[b"/".join(g + (raw,)).decode()] = labels
        self.groups = {b"/".join(g).decode() for g in taken}

    def tree(self):
        """What tree() finds: per group .zgroup and .zmetadata (.zattrs at
        the root), each array and its .npy, each coordinate array."""
        out = {".zattrs"} | {c + "/" for c in self.coords}
        for g in self.groups:
            pre = g + "/" if g else ""
            out |= {pre + ".zgroup", pre + ".zmetadata"}
        for p in self.paths:
            if p is not None:
                out |= {p + "/", p + ".npy"}
        return out


def layout_of(dss, meta=None):
    return Layout([d.name for d in dss], [d.array.shape for d in dss], meta)


def group_entries(names):
    """Path of each dataset in a zarr group view."""
    return [p.encode() for p in Layout(names).paths]


def tree(view):
    """Every group, array and file of a view (arrays not entered)."""
    out = set()
    for d, dirs, files in os.walk(view):
        rel = os.path.relpath(d, view)
        rel = "" if rel == "." else rel + "/"
        if ".zarray" in files:
            out.add(rel)
            dirs[:] = []
            continue
        out.update(rel + f for f in files)
    return out


def npy_of(view, path):
    return np.load(view / f"{path}.npy", mmap_mode="r")


def view_path(mnt, fname):
    return mnt / fname[:-len(".tet")]


# ---- upstream fixtures ---------------------------------------------------

def test_fixtures(mount):
    mnt = mount(FIXTURES / "tet")
    for fx in EXPECTED["files"]:
        src = FIXTURES / "tet" / fx["file"]
        # the container passes through unchanged, its view beside it
        assert sha(read_through(mnt / fx["file"])) == fx["file_sha256"]
        view = view_path(mnt, fx["file"])
        assert (view / ".zgroup").is_file()
        data = src.read_bytes()
        for ds in fx["datasets"]:
            name = ds["name"]
            arr = np.load(view / f"{name}.npy", mmap_mode="r")
            assert arr.dtype == np.dtype(ds["numpy"]) and list(arr.shape) == ds["shape"]
            assert sha(np.ascontiguousarray(arr).tobytes()) == ds["logical_sha256"]
            z = zarr.open(str(view), mode="r")[name]
            assert np.array_equal(z[...], arr)
            zattrs = json.loads((view / name / ".zattrs").read_text())
            assert zattrs["_ARRAY_DIMENSIONS"] == Layout(
                [name.encode()], [tuple(ds["shape"])]).dims[0]
            # xarray opens it from the consolidated metadata, without a warning
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                xds = xr.open_zarr(view)
                assert np.array_equal(xds[name].values, arr)
            assert np.array_equal(zarr.open_consolidated(str(view), mode="r")[name][...], arr)
        for ch in fx["chunks"]:
            name = fx["datasets"][ch["dataset_id"]]["name"]
            coords = ".".join(map(str, ch["coords"]))
            tile = read_through(view / ".shardfs" / "tiles" / name / coords)
            assert sha(tile) == ch["decoded_sha256"]
            assert tile == data[ch["payload_offset"]:ch["payload_offset"] + ch["raw_byte_len"]]
        verify = (view / ".shardfs" / "verify").read_text()
        assert verify.startswith("status: ok\n") == (fx["upstream_verify"] == "ok")
    # plan.tet: the damaged footer is reported, the dataset still reads
    assert "footer" in json.loads((mnt / "plan" / ".zattrs").read_text())["footer_error"]
    assert any("plan.tet" in line and "footer" in line
               for line in (mnt / ".shardfs" / "errors").read_text().splitlines())


def test_info_follows_tet_info(mount):
    mnt = mount(FIXTURES / "tet")
    info = (mnt / "sample" / ".shardfs" / "info.txt").read_text()
    # the layout upstream's `tet info --all -n 0` prints (spec §12.5)
    assert info.startswith("file: sample.tet\nsize: 368 bytes  layout_version: 1  "
                           "datasets: 1  chunks: 2\n")
    assert "    0  temperature           f32    2×3               2×2           2\n" in info
    assert "     1  temperature   0,1                8           8    raw  360\n" in info
    j = json.loads((mnt / "sample" / ".shardfs" / "info.json").read_text())
    fx = next(f for f in EXPECTED["files"] if f["file"] == "sample.tet")
    assert j["summary"]["superblock"]["chunk_index_length"] == fx["superblock"]["chunk_index_length"]
    assert [c["payload_offset"] for c in j["summary"]["chunks"]] == \
        [c["payload_offset"] for c in fx["chunks"]]


# ---- the writer's corpus -------------------------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("tetcorpus")
    return d, tw.write_corpus(d)


def stored_entries(path):
    """(dataset_id, coords, offset, raw, stored, codec) of every index entry."""
    b = path.read_bytes()
    n, index_off = struct.unpack_from("<I", b, 8)[0], struct.unpack_from("<Q", b, 16)[0]
    if n == 0:
        return []
    count = struct.unpack_from("<Q", b, index_off + 8)[0]
    out = []
    for k in range(count):
        f = struct.unpack_from("<Q8QQQQII", b, index_off + 32 + 104 * k)
        out.append((f[0], f[1:9], f[9], f[10], f[11], f[12]))
    return out


def corpus_meta(fname):
    return tw.corpus()[fname[:-len(".tet")]][1].get("footer", {}).get("metadata")


def test_corpus_arrays_and_chunks(mount, corpus):
    src, files = corpus
    mnt = mount(src)
    for fname, dss in files.items():
        view = view_path(mnt, fname)
        lay = layout_of(dss, corpus_meta(fname))
        entries = [p.encode() for p in lay.paths]
        assert tree(view) == lay.tree(), fname
        raw = (src / fname).read_bytes()
        index = stored_entries(src / fname)
        for did, (ds, entry) in enumerate(zip(dss, entries)):
            entry = entry.decode()
            want = ds.array
            got = np.load(view / f"{entry}.npy", mmap_mode="r")
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == tw.c_order(ds)
            # read in odd pieces through the kernel too
            whole = read_through(view / f"{entry}.npy", 4093)
            assert whole[len(whole) - want.nbytes:] == tw.c_order(ds)
            zarray = json.loads((view / entry / ".zarray").read_text())
            assert zarray["chunks"] == [max(1, min(c, s)) for c, s in zip(ds.chunks, want.shape)]
            assert zarray["dtype"] == want.dtype.str and zarray["compressor"] is None
            chunk_names = sorted(n for n in os.listdir(view / entry) if not n.startswith("."))
            cells = tw.cells(tw.grid_of(want.shape, ds.chunks))
            assert chunk_names == sorted(".".join(map(str, c)) for c in cells)
            for c in cells:
                cname = ".".join(map(str, c))
                assert read_through(view / entry / cname) == tw.zarr_chunk(ds, c)
                tile = tw.tile_of(want, c, ds.chunks).tobytes()
                tdir = view / ".shardfs" / "tiles" / entry
                assert read_through(tdir / cname) == tile
                e = next(x for x in index if x[0] == did and tuple(x[1][:want.ndim]) == c)
                if e[5] == 1:
                    stored = read_through(tdir / (cname + ".zst"))
                    assert stored == raw[e[2]:e[2] + e[4]]
                    assert zstandard.ZstdDecompressor().decompressobj().decompress(stored) == tile
                else:
                    assert not (tdir / (cname + ".zst")).exists()
        verify = (view / ".shardfs" / "verify").read_text()
        assert verify.startswith("status: ok\n"), (fname, verify)


def zmetadata_agrees(group):
    """A group's .zmetadata holds exactly the metadata files under it, each
    with the same JSON."""
    meta = json.loads((group / ".zmetadata").read_bytes().decode("ascii"))
    assert meta["zarr_consolidated_format"] == 1
    files = {}
    for d, _, names in os.walk(group):
        for n in names:
            if n in (".zgroup", ".zattrs", ".zarray"):
                p = Path(d) / n
                files[str(p.relative_to(group))] = json.loads(p.read_bytes().decode("ascii"))
    assert meta["metadata"] == files, group


def test_corpus_zarr_clients(mount, corpus):
    """Every corpus file through zarr and xarray: each group of the view
    opens consolidated with warnings as errors, straight and from the
    root, values equal the .npy files, dims and coordinates as documented."""
    src, files = corpus
    mnt = mount(src)
    for fname, dss in files.items():
        view = view_path(mnt, fname)
        lay = layout_of(dss, corpus_meta(fname))
        root = zarr.open_consolidated(str(view), mode="r")
        for ds, path, dims in zip(dss, lay.paths, lay.dims):
            z = zarr.open(str(view), mode="r")[path]
            assert z.dtype == ds.array.dtype and z.shape == ds.array.shape
            assert np.array_equal(z[...], ds.array), fname
            assert np.array_equal(root[path][...], ds.array), fname
            assert z.attrs["_ARRAY_DIMENSIONS"] == dims, (fname, path)
        for g in lay.groups:
            zmetadata_agrees(view / g)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for x in (xr.open_zarr(view, group=g or None), xr.open_zarr(view / g)):
                    for ds, path, dims in zip(dss, lay.paths, lay.dims):
                        if path.rpartition("/")[0] != g:
                            continue
                        v = x[path.rpartition("/")[2]]
                        assert list(v.dims) == dims
                        assert np.array_equal(v.values, npy_of(view, path)), (fname, path)
                        assert np.array_equal(v.values, ds.array)
                    for cpath, labels in lay.coords.items():
                        if cpath.rpartition("/")[0] == g:
                            dim = cpath.rpartition("/")[2]
                            assert list(x.indexes[dim]) == labels
                            assert x[dim].dims == (dim,)
                    # (xarray takes a dataset named like a dimension,
                    # a/b/p, as a coordinate too)
                    here = {p.rpartition("/")[2] for p in list(lay.paths) + list(lay.coords)
                            if p.rpartition("/")[0] == g}
                    assert set(x.variables) == here


def files_paths(dss):
    return Layout([d.name for d in dss]).paths


def test_hierarchy_and_coordinates(mount, corpus):
    """The nested corpus file, spelled out (docs/formats/tet.md, Names)."""
    src, files = corpus
    mnt = mount(src)
    view = mnt / "nested"
    assert sorted(p for p in tree(view) if not p.startswith(".")) == sorted([
        "a/.zgroup", "a/.zmetadata", "a/b/.zgroup", "a/b/.zmetadata",
        "a/b/c/", "a/b/c.npy", "a/b/d/", "a/b/d.npy", "a/b/p/", "a/b/p.npy",
        "a/b/q/",                              # coordinate q of a/b/c
        "a/e/", "a/e.npy", "a/e#1/", "a/e#1.npy",  # a duplicate name
        "a/b.npy/", "a/b.npy.npy",             # a prefix of a/b.npy/z, which stays escaped
        "x/", "x.npy", "x%2Fy/", "x%2Fy.npy",  # x is an array, so x/y cannot nest
        "a%2F%2Fb/", "a%2F%2Fb.npy", "a%2F.%2Fb/", "a%2F.%2Fb.npy",
        "g%2F.zarray/", "g%2F.zarray.npy", "h%2Fi%25j/", "h%2Fi%25j.npy",
        "a%2Fb.npy%2Fz/", "a%2Fb.npy%2Fz.npy"])
    g = zarr.open_group(str(view), mode="r")
    assert np.array_equal(g["a/b/c"][...], files["nested.tet"][0].array)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = xr.open_zarr(view, group="a/b")
    assert list(x["q"].values) == ["q0", "\u00e9t\u00e9"] and x["c"].dims == ("p", "q")
    assert x["c"].attrs == {"units": "m"}
    q = json.loads((view / "a" / "b" / "q" / ".zarray").read_text())
    assert q["dtype"] == "<U3" and q["shape"] == [2] and q["fill_value"] is None
    assert (view / "a" / "b" / "q" / "0").read_bytes() == "q0\0\u00e9t\u00e9".encode("utf-32-le")
    # p is both a coordinate of a/b's datasets and the dataset a/b/p: the
    # dataset keeps the name; s has one label for two positions
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "coordinate p not shown" in errors and "coordinate s not shown" in errors
    assert "coordinate u not shown: datasets give it different labels" in errors
    # tiles follow the hierarchy
    assert sorted(os.listdir(view / ".shardfs" / "tiles" / "a" / "b")) == ["c", "d", "p"]
    info = json.loads((view / ".shardfs" / "info.json").read_text())
    entries = [d["entry"] for d in info["summary"]["datasets"]]
    assert entries == files_paths(files["nested.tet"])


def zero_copy_span(path, ds_id, ds):
    """Spec §7.6 computed from the stored index: (offset, nbytes) or None."""
    shape, chunks = ds.array.shape, ds.chunks
    j = max((d for d in range(len(shape)) if chunks[d] < shape[d]), default=-1)
    if any(chunks[d] != 1 and shape[d] != 1 for d in range(j)) or not ds.array.nbytes:
        return None
    by = {tuple(e[1][:len(shape)]): e for e in stored_entries(path) if e[0] == ds_id}
    cells = tw.cells(tw.grid_of(shape, chunks))
    if any(by[c][5] != 0 for c in cells):
        return None
    for a, b in zip(cells, cells[1:]):
        if by[a][2] + by[a][3] != by[b][2]:
            return None
    return [by[cells[0]][2], ds.array.nbytes]


def test_zero_copy_when_layout_allows(mount, corpus):
    src, files = corpus
    mnt = mount(src)
    seen = 0
    for fname, dss in files.items():
        info = json.loads((view_path(mnt, fname) / ".shardfs" / "info.json").read_text())
        for i, ds in enumerate(dss):
            want = zero_copy_span(src / fname, i, ds)
            assert info["summary"]["datasets"][i]["zero_copy_span"] == want, (fname, i)
            seen += want is not None
    assert seen >= 2  # the zero_copy case has two row-slab datasets


def test_bytes_come_from_mapping_or_one_decode(mount, corpus):
    """Raw interior chunks and zero-copy .npy data are served from the
    mapping; each zstd tile is decoded once, however many files show it."""
    src, _ = corpus
    mnt = mount(src)

    def delta(*paths):
        def now():
            j = json.loads((mnt / ".shardfs" / "stats.json").read_text())
            return {**j["bytes_served"], **j["cache"]}
        before = now()
        for p in paths:
            read_through(mnt / p)
        after = now()
        return {k: after[k] - before[k] for k in ("from_mappings", "from_cache",
                                                  "bytes_decoded", "parts_decoded")}
    # slabs (10,4,3) i4 in (3,4,3) row slabs: spec §7.6 holds
    d = delta("zero_copy/slabs.npy")
    assert d == dict(from_mappings=10 * 4 * 3 * 4, from_cache=0, bytes_decoded=0, parts_decoded=0)
    # m (9,10,3) f8 in (4,3,2) tiles: cell (0,0,0) is a raw interior tile
    d = delta("mixed_shuffled_gaps/m/0.0.0")
    assert d == dict(from_mappings=4 * 3 * 2 * 8, from_cache=0, bytes_decoded=0, parts_decoded=0)
    # v (6,6) u4 in (4,4) zstd tiles, shown by chunk files, tile files and v.npy
    cells = ["0.0", "0.1", "1.0", "1.1"]
    d = delta(*[f"reverse/v/{c}" for c in cells],
              *[f"reverse/.shardfs/tiles/v/{c}" for c in cells], "reverse/v.npy")
    assert d["parts_decoded"] == 4 and d["bytes_decoded"] == 6 * 6 * 4


def test_footer_metadata(mount, corpus):
    src, files = corpus
    mnt = mount(src)
    for fname in ("footer.tet", "footer_spill.tet"):
        view = view_path(mnt, fname)
        meta = tw.corpus()[fname[:-4]][1]["footer"]
        group = json.loads((view / ".zattrs").read_text())
        assert group["metadata"] == meta["metadata"]
        assert group["history"] == meta["history"]
        attrs = json.loads((view / "t" / ".zattrs").read_text())
        assert attrs["_ARRAY_DIMENSIONS"] == ["y", "x"]
        assert attrs["units"] == "K" and attrs["long_name"] == "temperature"
        info = (view / ".shardfs" / "info.txt").read_text()
        assert "       dim_names: y, x\n" in info and "       units: K\n" in info
        assert "coords: x(3 labels)" in info
    assert "memory_budget_percent: 25\n" in (mnt / "footer" / ".shardfs" / "info.txt").read_text()


# ---- bad input -------------------------------------------------------------

def damaged_files(d):
    """name -> bytes of files that break one rule of spec §11 each, and the
    datasets of the file they were made from."""
    good = [tw.Dataset(b"a", tw.ramp((4, 3), "<f4"), (2, 2), tw.alternate),
            tw.Dataset(b"b", tw.ramp((5,), "<u2"), (2,), "zstd")]
    base = d / "base.tet"
    lay = tw.write_tet(base, good)
    b = base.read_bytes()
    out = {}

    def patched(name, *edits):
        x = bytearray(b)
        for off, fmt, val in edits:
            struct.pack_into(fmt, x, off, val)
        out[name] = bytes(x)

    e = lay.entry_offsets
    patched("bad_magic", (0, "<4s", b"XETR"))
    patched("index_past_end", (24, "<Q", len(b)))
    patched("chunk_outside", (e[1] + 72, "<Q", len(b) - 1))
    patched("bad_codec", (e[0] + 96, "<I", 5))
    out["torn"] = b[:-7]
    # refused datasets: the file opens without them
    # a's chunk (0,0) takes the coordinates of (1,0), whose tile has the same
    # size: only the duplicate itself is wrong, and cell (0,0) has no chunk
    coords2 = struct.unpack_from("<8Q", b, e[2] + 8)
    assert coords2[:2] == (1, 0)
    patched("dup_coords", *[(e[0] + 8 + 8 * i, "<Q", v) for i, v in enumerate(coords2)])
    rec_b = lay.record_offsets[1]
    patched("zero_chunk_extent", (rec_b + 24 + 8, "<Q", 0))
    # b's first tile recompressed from one byte less: decodes to the wrong size
    eb = e[4]
    off, stored = struct.unpack_from("<Q", b, eb + 72)[0], struct.unpack_from("<Q", b, eb + 88)[0]
    short = tw.zstd_frame(b"\1\2\3")
    assert len(short) <= stored
    x = bytearray(b)
    x[off:off + len(short)] = short
    struct.pack_into("<Q", x, eb + 88, len(short))
    out["zstd_size"] = bytes(x)
    base.unlink()
    return out, good


def test_bad_input(mount, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files, good = damaged_files(tmp_path)
    for name, data in files.items():
        (src / f"{name}.tet").write_bytes(data)
    shutil.copy(FIXTURES / "tet" / "sample.tet", src / "fine.tet")
    mnt = mount(src)
    names = set(os.listdir(mnt))
    # refused by the listing's check (magic, superblock, size): no view
    for refused in ("bad_magic", "index_past_end"):
        assert refused not in names and f"{refused}.tet" in names
        assert read_through(mnt / f"{refused}.tet") == files[refused]
    # refused when the view is entered (the chunk index and datasets, past
    # the superblock and the file's last bytes): an empty view whose verify
    # says why
    for late in ("chunk_outside", "bad_codec", "torn"):
        assert late in names and os.listdir(mnt / late) == []
        assert (mnt / late / ".shardfs" / "verify").read_text().startswith("status: failed\n")
        assert read_through(mnt / f"{late}.tet") == files[late]
    # a dataset that fails validation has no entries; the other one reads
    assert sorted(os.listdir(mnt / "dup_coords")) == [".zattrs", ".zgroup", ".zmetadata", "b", "b.npy"]
    assert sorted(os.listdir(mnt / "zero_chunk_extent")) == [".zattrs", ".zgroup", ".zmetadata", "a", "a.npy"]
    errors = (mnt / ".shardfs" / "errors").read_text()
    for refused in ("bad_magic", "index_past_end", "chunk_outside", "bad_codec", "torn"):
        assert f"{refused}.tet" in errors
    assert np.array_equal(np.load(mnt / "dup_coords" / "b.npy"), good[1].array)
    assert np.array_equal(np.load(mnt / "zero_chunk_extent" / "a.npy"), good[0].array)
    for name in ("dup_coords", "zero_chunk_extent"):
        assert (mnt / name / ".shardfs" / "verify").read_text().startswith("status: failed\n")
    # each refused dataset is one line in the errors, naming its problem
    lines = errors.splitlines()
    assert [ln for ln in lines if "dup_coords.tet" in ln and "coordinates" in ln]
    assert len([ln for ln in lines if "dup_coords.tet" in ln]) == 1
    assert [ln for ln in lines if "zero_chunk_extent.tet" in ln and "chunk_shape" in ln]
    # zstd decoding to the wrong size: listed with its size, reads fail EIO
    view = mnt / "zstd_size"
    assert (view / "b" / "0").stat().st_size == 4
    for p in (view / "b" / "0", view / ".shardfs" / "tiles" / "b" / "0", view / "b.npy"):
        with pytest.raises(OSError) as exc:
            read_through(p)
        assert exc.value.errno == errno.EIO
    assert read_through(view / "b" / "1") == tw.zarr_chunk(good[1], (1,))
    assert np.array_equal(np.load(view / "a.npy", mmap_mode="r"), good[0].array)
    verify = (view / ".shardfs" / "verify").read_text()
    assert verify.startswith("status: failed\n") and "chunk_decode" in verify
    # the rest of the mount keeps working
    assert np.array_equal(np.load(mnt / "fine" / "temperature.npy"),
                          np.arange(1, 7, dtype="<f4").reshape(2, 3))


def test_info_json_full_u64(mount, tmp_path):
    """info.json keeps u64 fields whole: junk in an unused coordinate slot
    (ignored, spec §6.2) and the shape of a refused dataset over 2^63."""
    src = tmp_path / "src"
    src.mkdir()
    lay = tw.write_tet(src / "u64.tet", [tw.Dataset(b"a", tw.ramp((3,), "<u2"), (2,)),
                                         tw.Dataset(b"b", tw.ramp((2,), "<u2"), (2,))])
    x = bytearray((src / "u64.tet").read_bytes())
    struct.pack_into("<Q", x, lay.entry_offsets[0] + 8 + 8 * 7, 2**64 - 1)
    rec_b = lay.record_offsets[1]
    struct.pack_into("<Q", x, rec_b + 24, 2**63 + 5)  # b's shape[0]
    (src / "u64.tet").write_bytes(bytes(x))
    mnt = mount(src)
    j = json.loads((mnt / "u64" / ".shardfs" / "info.json").read_text())
    assert [int(v) for v in j["summary"]["chunks"][0]["chunk_index"]] == [0] * 7 + [2**64 - 1]
    assert [int(v) for v in j["summary"]["datasets"][1]["shape"]] == [2**63 + 5]
    assert j["summary"]["datasets"][1]["problem"]
    assert np.array_equal(np.load(mnt / "u64" / "a.npy"), tw.ramp((3,), "<u2"))


# ---- a 1 GiB dataset within the cache budget ------------------------------

# An ASan build's shadow memory on x86_64 (LowShadow to HighShadow): reading
# a 1 GiB mapped source fills its shadow to 128 MiB, the sanitizer's
# bookkeeping rather than anything shardfs allocated.
ASAN_SHADOW = (0x7fff8000, 0x10007fff8000)


def rss_anon_kib(pid):
    """Anonymous resident memory: what the daemon allocated, without the
    page cache of the mapped source file that raw tiles are served from,
    and without an ASan build's shadow."""
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split(" ", 1)[0]
            if "-" in head and not line.startswith(("Anonymous", "VmFlags")):
                try:
                    start = int(head.split("-")[0], 16)
                except ValueError:
                    continue
                inside = ASAN_SHADOW[0] <= start < ASAN_SHADOW[1]
            elif line.startswith("Anonymous:") and not inside:
                total += int(line.split()[1])
    return total


def test_big_dataset_memory(mount, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    tw.write_big(src / "big.tet")
    mnt = mount(src, "--cache-size", "64M")
    pid = mount.last.proc.pid
    arr = np.load(mnt / "big" / "big.npy", mmap_mode="r")
    rows, cols = arr.shape
    assert arr.nbytes == 1 << 30
    step = 256
    peak = 0
    for r0 in range(0, rows, step):
        got = np.array(arr[r0:r0 + step])
        idx = (np.arange(r0, r0 + step, dtype=np.uint64)[:, None] * np.uint64(cols) +
               np.arange(cols, dtype=np.uint64)[None, :])
        want = (idx * np.uint64(2654435761) % np.uint64(1 << 32)).astype("<u4")
        assert np.array_equal(got, want), r0
        del got
        peak = max(peak, rss_anon_kib(pid))
    # decoded tiles are 4 MiB each; the daemon stays near its 64 MiB budget
    assert peak < 160 * 1024, peak


def test_xarray_open_reads_one_metadata_file_per_group(mount, tmp_path):
    """xr.open_zarr of a group of a 1,000-dataset view opens one file (the
    .zmetadata it reads), counted by the daemon; without consolidated
    metadata zarr opens every .zarray and .zattrs."""
    src = tmp_path / "src"
    src.mkdir()
    n, groups = 1000, 10
    tw.write_tet(str(src / "many.tet"),
                 [tw.Dataset(f"grp{i % groups}/var{i}".encode(), tw.ramp((3, 2), "<f4", i), (2, 2))
                  for i in range(n)])
    # opens are what it counts: by default the kernel sends none
    mnt = mount(src, "--open")
    view = mnt / "many"

    def opens(fn):
        before = mount_stats(mnt)["requests"]["open"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            x = fn()
        # the second stats.json read is one open of its own
        return mount_stats(mnt)["requests"]["open"] - before - 1, x
    got, x = opens(lambda: xr.open_zarr(view))
    assert got == 1 and len(x.data_vars) == 0     # the root holds only groups
    got, x = opens(lambda: xr.open_zarr(view, group="grp3"))
    assert got == 1 and len(x.data_vars) == n // groups
    assert np.array_equal(x["var13"].values, tw.ramp((3, 2), "<f4", 13))
    got, x = opens(lambda: xr.open_zarr(view / "grp4"))
    assert got == 1 and len(x.data_vars) == n // groups
    # the same group read array by array: what consolidation saves
    got, x = opens(lambda: xr.open_zarr(view / "grp5", consolidated=False))
    assert got >= 2 * n // groups


def test_zmetadata_bounded_by_cache(mount, tmp_path):
    """Duplicate names share their footer metadata, so a .zmetadata can grow
    as the product of the two: past --cache-size it fails with EIO before it
    is made, and the files it would gather still read."""
    src = tmp_path / "src"
    src.mkdir()
    attrs = {f"k{i}": "v" * 1000 for i in range(60)}
    tw.write_tet(str(src / "dups.tet"),
                 [tw.Dataset(b"g/d", tw.ramp((2,), "|u1", i), (2,)) for i in range(300)],
                 footer={"history": [], "metadata": {"datasets": {"g/d": {"attrs": attrs}}}})
    mnt = mount(src, "--cache-size", "16M")
    view = mnt / "dups"
    for p in (view / ".zmetadata", view / "g" / ".zmetadata"):
        with pytest.raises(OSError) as err:
            p.read_bytes()
        assert err.value.errno == errno.EIO
    assert json.loads((view / "g" / "d#299" / ".zattrs").read_text())["k59"] == "v" * 1000
    assert any("dups.tet" in line and ".zmetadata" in line and "cache limit" in line
               for line in (mnt / ".shardfs" / "errors").read_text().splitlines())


def test_many_duplicate_names_linear(mount, tmp_path):
    """20,000 datasets of two names: each entry is found with its name's
    next free number, not by trying #1, #2 ... again (quadratic: some 10^8
    tries, minutes under ASan; linear: well under a second)."""
    src = tmp_path / "src"
    src.mkdir()
    n = 10000
    tw.write_tet(str(src / "dups.tet"),
                 [tw.Dataset(b"d" if i < n else b"g/d", tw.ramp((1,), "|u1", i), (1,))
                  for i in range(2 * n)])
    mnt = mount(src)
    t = time.monotonic()
    top = os.listdir(mnt / "dups")
    sub = os.listdir(mnt / "dups" / "g")
    took = time.monotonic() - t
    assert len(top) == 3 + 1 + 2 * n and len(sub) == 2 + 2 * n
    assert "d#9999" in top and "d#9999.npy" in sub and "d#10000" not in sub
    assert took < 60, took
