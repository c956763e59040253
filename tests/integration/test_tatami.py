"""tatami views read through a real mount (docs/design.md §3.6): the upstream
fixtures against what upstream's reader recovers, the writer's files against
the values the writer put in, and damaged files against docs/design.md §3.4."""
import base64
import errno
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, WRITERS, read_through

TAT = FIXTURES / "tatami"
FIXTURE_FILES = sorted(p.name for p in TAT.glob("*.tatami"))


def sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.fixture
def fixmnt(mount):
    return mount(TAT)


@pytest.mark.parametrize("name", FIXTURE_FILES)
def test_fixture_matches_upstream(fixmnt, name):
    truth = json.loads((TAT / (name + ".upstream.json")).read_text())
    view = fixmnt / name[:-len(".tatami")]
    assert (view / ".shardfs" / "info.txt").read_text() == truth["inspect"]
    names = [s["name"] for s in truth["schema"]]
    views = [("valid_sha256", "valid.bin"), ("values_sha256", "values.bin"),
             ("offsets_sha256", "offsets.bin"), ("data_sha256", "data.bin")]
    for col in truth["columns"]:
        for key, fname in views:
            if key in col:
                assert sha(read_through(view / "columns" / col["name"] / fname)) == col[key], (col["name"], fname)
    for g, grp in enumerate(truth["row_groups"] or []):
        for ch in grp["chunks"]:
            d = view / "rowgroups" / str(g) / names[ch["column_id"]]
            for key, fname in views:
                if key in ch["decoded"]:
                    assert sha(read_through(d / fname, 4096)) == ch["decoded"][key]
            chunk = read_through(d / "chunk.bin")
            raw = (TAT / name).read_bytes()
            assert chunk == raw[ch["first_page_offset"]:ch["first_page_offset"] + len(chunk)]
    rows = (view / "rows.jsonl").read_text().split("\n")[:-1]
    assert len(rows) == truth["header"]["row_count"]
    assert rows[:len(truth["cat_head"] or [])] == (truth["cat_head"] or [])
    inv = truth.get("inverted")
    if inv:
        lines = (view / "inverted" / "terms.txt").read_text().split("\n")[:-1]
        assert len(lines) == inv["num_terms"]
        for line in lines:
            term, df = line.split("\t")
            assert int(df) == inv["terms"][term]["df"]
            post = (view / "inverted" / "postings" / term).read_text().split("\n")[:-1]
            packed = b"".join(struct.pack("<II", *map(int, p.split("\t"))) for p in post)
            assert sha(packed) == inv["terms"][term]["postings_sha256"]
        assert (view / "inverted" / "deleted.txt").read_text() == ""
    assert (view / ".shardfs" / "verify").read_text().startswith("status: ok\n")


def test_numpy_mmap(fixmnt):
    truth = json.loads((TAT / "g01_alltypes.tatami.upstream.json").read_text())
    col = {s["name"]: s for s in truth["schema"]}
    for name, dtype in [("b", "|b1"), ("i8", "|i1"), ("u64", "<u8"), ("f32", "<f4"), ("ts", "<M8[us]")]:
        a = np.load(fixmnt / "g01_alltypes" / "columns" / name / "values.npy", mmap_mode="r")
        assert a.dtype == np.dtype(dtype) and a.shape == (700,)
        assert a.tobytes() == read_through(fixmnt / "g01_alltypes" / "columns" / name / "values.bin")
        assert col[name]


# ---- the writer's files ---------------------------------------------------

DT = {"bool": "u1", "int8": "<i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "<u1",
      "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "float32": "<f4", "float64": "<f8",
      "timestamp_micros": "<i8"}


def value(v):
    if isinstance(v, dict):
        return bytes.fromhex(v["hex"]) if "hex" in v else float(v["float"])
    return v


def go_float(x, f32):
    """encoding/json's float text, computed with numpy's shortest digits."""
    if x != x or x in (float("inf"), float("-inf")):
        return '"NaN"' if x != x else '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0:
        return "-0" if str(x).startswith("-") else "0"
    v = np.float32(x) if f32 else np.float64(x)
    mant, exp = np.format_float_scientific(v, unique=True, trim="-").split("e")
    exp = int(exp)
    neg = mant.startswith("-")
    digits = mant.lstrip("-").replace(".", "")
    a = abs(float(v))
    if a < 1e-6 or a >= 1e21:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return ("-" if neg else "") + body + ("e-%d" % -exp if exp < 0 else "e+%02d" % exp)
    dp = exp + 1
    if dp <= 0:
        body = "0." + "0" * -dp + digits
    elif dp >= len(digits):
        body = digits + "0" * (dp - len(digits))
    else:
        body = digits[:dp] + "." + digits[dp:]
    return ("-" if neg else "") + body


def go_json(v, t):
    if v is None:
        return "null"
    if t == "bool":
        return "true" if v else "false"
    if t in ("float32", "float64"):
        return go_float(v, t == "float32")
    if t == "string":
        s = json.dumps(v, ensure_ascii=False)
        for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                     ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
            s = s.replace(a, b)
        return s
    if t in ("bytes", "blobref"):
        return json.dumps(base64.b64encode(v).decode())
    return str(v)


def expected_views(t, vals):
    valid = bytes(0 if v is None else 1 for v in vals)
    out = {"valid.bin": valid,
           "values.jsonl": "".join(go_json(v, t) + "\n" for v in vals).encode()}
    if t in ("string", "bytes", "blobref"):
        data, offs = b"", [0]
        for v in vals:
            data += b"" if v is None else v.encode() if isinstance(v, str) else v
            offs.append(len(data))
        out["offsets.bin"] = struct.pack("<%dQ" % len(offs), *offs)
        out["data.bin"] = data
    elif t != "list":
        arr = np.array([0 if v is None else v for v in vals], dtype=np.dtype(DT[t]))
        out["values.bin"] = arr.tobytes()
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("tatami-written")
    subprocess.run([sys.executable, str(WRITERS / "tatami_writer.py"), str(d)], check=True)
    return d


@pytest.mark.parametrize("name", ["w_alltypes", "w_blob", "w_search_tree", "w_search_flat", "w_empty"])
def test_writer_files(mount, written, name):
    exp = json.loads((written / (name + ".tatami.expect.json")).read_text())
    view = mount(written) / name
    for col in exp["columns"]:
        t, vals = col["type"], [value(v) for v in col["values"]]
        d = view / "columns" / col["name"].replace("%", "%25").replace("/", "%2F")  # §3.3
        for fname, want in expected_views(t, vals).items():
            assert read_through(d / fname, 1000) == want, (col["name"], fname)
        if "values.bin" in expected_views(t, vals) and t != "list":
            assert np.load(d / "values.npy", mmap_mode="r").shape == (len(vals),)
        start = 0
        for g, n in enumerate(exp["groups"]):
            gd = view / "rowgroups" / str(g) / d.name
            for fname, want in expected_views(t, vals[start:start + n]).items():
                assert read_through(gd / fname) == want, (col["name"], g, fname)
            start += n
        if t == "blobref":
            bdir = view / "blobs" / d.name
            present = [str(i) for i, v in enumerate(vals) if v is not None]
            assert sorted(p.name for p in bdir.iterdir()) == sorted(present)
            for i in present:
                assert (bdir / i).read_bytes() == vals[int(i)]
    rows = (view / "rows.jsonl").read_text().split("\n")[:-1]
    assert len(rows) == sum(exp["groups"])
    if "postings" in exp:
        inv = view / "inverted"
        terms = sorted(exp["df"], key=lambda s: s.encode())
        assert (inv / "terms.txt").read_text() == "".join("%s\t%d\n" % (t, exp["df"][t]) for t in terms)
        for t, ps in exp["postings"].items():
            assert (inv / "postings" / t).read_text() == "".join("%d\t%d\n" % tuple(p) for p in ps)
        assert (inv / "deleted.txt").read_text() == "".join("%d\n" % d for d in exp["deleted"])
    assert (view / ".shardfs" / "verify").read_text().startswith("status: ok\n")


# ---- bad input --------------------------------------------------------------

def test_damaged_files(mount, tmp_path):
    raw = bytearray((TAT / "g06_tiny.tatami").read_bytes())
    bad_page = bytearray(raw)
    bad_page[100] ^= 0x40          # inside the only page's payload (spec §22)
    (tmp_path / "page.tatami").write_bytes(bad_page)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.tatami").write_bytes(bad_page)
    bad_footer = bytearray(raw)
    bad_footer[120] ^= 1           # inside the footer
    (tmp_path / "footer.tatami").write_bytes(bad_footer)
    (tmp_path / "torn.tatami").write_bytes(raw[:150])
    shutil.copy(TAT / "g06_tiny.tatami", tmp_path / "good.tatami")
    mnt = mount(tmp_path)
    names = sorted(p.name for p in mnt.iterdir())
    assert "good" in names and "page" in names
    # a torn file fails the listing's check: no view; a damaged footer is
    # found when the view is entered: an empty view whose verify says why
    assert "torn" not in names and "footer" in names
    assert os.listdir(mnt / "footer") == []
    verify = (mnt / "footer" / ".shardfs" / "verify").read_text()
    assert verify.startswith("status: failed\n") and "footer checksum" in verify
    assert (mnt / "footer.tatami").read_bytes() == bytes(bad_footer)
    assert (mnt / "page" / "columns" / "n" / "values.bin").stat().st_size == 12
    with pytest.raises(OSError) as ei:
        (mnt / "page" / "columns" / "n" / "values.bin").read_bytes()
    assert ei.value.errno == errno.EIO
    with pytest.raises(OSError) as ei:
        (mnt / "sub" / "deep" / "columns" / "n" / "values.bin").read_bytes()
    assert ei.value.errno == errno.EIO
    assert (mnt / "good" / "columns" / "n" / "values.bin").read_bytes() == struct.pack("<3i", 7, 0, -3)
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "footer.tatami" in errors and "torn.tatami" in errors
    assert "page/columns/n/values.bin" in errors and "checksum" in errors
    # an error line names the part by its whole path in the mount
    assert any(line.split()[1:2] == ["sub/deep/columns/n/values.bin:"]
               for line in errors.splitlines()), errors


# ---- hostile files built from the spec ---------------------------------------

sys.path.insert(0, str(WRITERS))
import tatami_writer as tw  # noqa: E402


def hostile_file(cols, groups, chunk=None, extra=None):
    """cols: [(name, type id, flags)]; groups: one (rows, pages) per row group,
    pages[c]: [(encoding, payload, page rows, page flags)] stored with codec
    NONE; chunk[(g, c)]: footer fields to override; extra(body_end) -> (bytes
    after the pages, [(footer tag, body)])."""
    body, rowgroups, total = bytearray(64), [], 0
    for g, (rows, pages) in enumerate(groups):
        entries = []
        for c, plist in enumerate(pages):
            first = len(body)
            for enc, payload, n, fl in plist:
                body += tw.record(0, enc, tw.NONE, fl, n, payload, payload)
            f = dict(dict(rows=rows, nulls=0, pages=len(plist), first=first), **(chunk or {}).get((g, c), {}))
            entries.append(b"".join(tw.uvarint(v) for v in (c, f["first"], 0, 0, f["rows"], f["nulls"], f["pages"]))
                           + bytes([0, tw.NONE, 0]))
        rowgroups.append(tw.uvarint(total) + tw.uvarint(rows) + tw.uvarint(0) + b"\x00"
                         + tw.uvarint(len(entries)) + b"".join(entries))
        total += rows
    tail, sections = extra(len(body)) if extra else (b"", [])
    body += tail
    sections = [(1, tw.uvarint(len(cols)) + b"".join(tw.lenbytes(n.encode()) + bytes([t, f, 0]) for n, t, f in cols)),
                (2, tw.uvarint(len(rowgroups)) + b"".join(rowgroups))] + sections
    sections.append((7, tw.uvarint(total) + b"\x00\x00"))
    footer = b"\x00" + b"".join(tw.uvarint(t) + tw.lenbytes(b) for t, b in sections)
    hdr = b"TAT1" + struct.pack("<HHHBBI", 1, 1, 0, 1, 2, 0) + bytes(16) + struct.pack("<QQQI", total, len(body), 0, 0)
    body[:64] = hdr + struct.pack("<I", tw.crc32c(hdr))
    return bytes(body) + footer + struct.pack("<II", len(footer), tw.crc32c(footer)) + b"TAT1"


def read_errno(path):
    try:
        read_through(path)
    except OSError as e:
        return e.errno
    return None


def test_hostile_pages_fail_eio(mount, tmp_path):
    """Views of a page that fails to decode, whatever their size, read EIO
    (docs/design.md §3.4: never empty content) and each failed read is logged."""
    ints = struct.pack("<3i", 7, 0, -3)
    (tmp_path / "h.tatami").write_bytes(hostile_file(
        [("n", 3, 0), ("s", 11, 0), ("ok", 3, 0)],
        [(3, [[(2, ints, 3, 0)],                                   # DICTIONARY on an integer page
              [(0, tw.lenbytes(b"ab") + tw.uvarint(99) + b"c", 3, 0)],  # a string runs past the page
              [(0, ints, 3, 0)]])]))
    mnt = mount(tmp_path)
    v = mnt / "h"
    assert (v / "columns" / "ok" / "values.bin").read_bytes() == ints
    broken = ["columns/n/values.bin", "columns/n/values.jsonl", "rowgroups/0/n/values.jsonl",
              "columns/s/offsets.bin", "columns/s/data.bin", "columns/s/values.jsonl",
              "rowgroups/0/s/offsets.bin", "rowgroups/0/s/data.bin", "rows.jsonl"]
    for rel in broken:
        (v / rel).stat()
        assert read_errno(v / rel) == errno.EIO, rel
    errors = (mnt / ".shardfs" / "errors").read_text()
    for rel in broken:
        assert "h/%s: " % rel in errors, rel
    assert "not an integer encoding: 2" in errors and "short string payload" in errors


def test_hostile_row_count(mount, tmp_path):
    """A chunk whose footer claims 2^63 rows: its views stat, and read EIO
    rather than empty or header-only content."""
    (tmp_path / "h.tatami").write_bytes(hostile_file(
        [("n", 3, 0)], [(3, [[(0, struct.pack("<3i", 7, 0, -3), 3, 0)]])], chunk={(0, 0): {"rows": 1 << 63}}))
    v = mount(tmp_path) / "h"
    for rel in ["valid.bin", "values.bin", "values.npy", "values.jsonl"]:
        (v / "columns" / "n" / rel).stat()
        assert read_errno(v / "columns" / "n" / rel) == errno.EIO, rel
        assert read_errno(v / "rowgroups" / "0" / "n" / rel) == errno.EIO, rel


def blob_run(values, lens=None):
    lens = [len(x) for x in values] if lens is None else lens
    payload = tw.uvarint(len(values)) + b"".join(map(tw.uvarint, lens)) + b"".join(values)
    return tw.record(3, 0, tw.NONE, 0, len(values), payload, payload)


def blob_region(values, lens=None):
    """hostile_file's `extra` for blob column 0: one run holding `values`."""
    def extra(at):
        run = blob_run(values, lens)
        desc = tw.uvarint(1) + tw.uvarint(0) + tw.uvarint(0) + bytes([tw.NONE]) + tw.uvarint(1) \
            + b"".join(map(tw.uvarint, (at, len(run) - 32, len(run) - 32, len(values))))
        return run, [(3, desc)]
    return extra


def test_hostile_blob_lengths(mount, tmp_path):
    """A blob run whose value lengths overflow 64 bits: its blobs read EIO, the
    daemon stays up, and the same column in an intact file reads exactly."""
    vals = [b"hello", b"", b"world!"]
    for name, lens in [("good", None), ("wrap", [5, (1 << 64) - 1, 6]), ("over", [5, 0, 60])]:
        (tmp_path / (name + ".tatami")).write_bytes(
            hostile_file([("d", 15, 0)], [(3, [[(0, b"", 3, 0)]])], extra=blob_region(vals, lens)))
    mnt = mount(tmp_path)
    good = mnt / "good"
    assert [read_through(good / "blobs" / "d" / str(i)) for i in range(3)] == vals
    assert read_through(good / "columns" / "d" / "data.bin") == b"".join(vals)
    for name in ["wrap", "over"]:
        for rel in ["blobs/d/0", "blobs/d/1", "blobs/d/2", "columns/d/data.bin", "columns/d/values.jsonl"]:
            assert read_errno(mnt / name / rel) == errno.EIO, (name, rel)
    assert json.loads((mnt / ".shardfs" / "stats.json").read_text())


def test_blobs_skip_damaged_group(mount, tmp_path):
    """Group 0's validity page of a blob column fails its CRC: blobs/<col>/
    still lists group 1's present rows under their global row numbers, with
    their exact bytes, and the skipped group is reported once."""
    vals = [b"g0-a", b"g0-b", b"one", b"", b"three"]  # ordinals: group 0 takes 0-1
    raw = bytearray(hostile_file(
        [("d", 15, 1)],
        [(3, [[(0, bytes([0b101]), 3, 2)]]),               # rows 0 and 2 present
         (4, [[(0, bytes([0b1101]), 4, 2)]])],             # rows 3, 5 and 6 present
        chunk={(0, 0): {"nulls": 1}, (1, 0): {"nulls": 1}}, extra=blob_region(vals)))
    raw[64 + 24] ^= 0xFF                                   # group 0's page CRC (spec §6)
    (tmp_path / "h.tatami").write_bytes(raw)
    mnt = mount(tmp_path)
    blobs = mnt / "h" / "blobs" / "d"
    assert sorted(os.listdir(blobs), key=int) == ["3", "5", "6"]
    assert sorted(os.listdir(blobs), key=int) == ["3", "5", "6"]   # listed once, reported once
    assert [read_through(blobs / r) for r in ["3", "5", "6"]] == vals[2:]
    lines = (mnt / ".shardfs" / "errors").read_text().splitlines()
    assert len(lines) == 1, lines
    assert re.match(r"^\S+ h\.tatami: blobs/d: row group 0: .*; its blobs are not listed$", lines[0]), lines
