"""tsumugi shards through the mount: the upstream fixtures against their
truth files, shards from our writer against the expectations it computes,
and corrupt shards (spec A11) refused or failing with EIO."""
import base64
import errno
import hashlib
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, WRITERS, read_through

sys.path.insert(0, str(WRITERS))
from tsumugi_writer import crc32c  # noqa: E402 (the writer's own CRC32C)

TSM = FIXTURES / "tsumugi"
GOLD = sorted(p.name for p in TSM.glob("*.tsumugi"))
KINDS = {1: "lexical", 2: "forward", 3: "feature", 4: "graph", 5: "vector", 6: "dictionary"}
CODECS = {0: "none", 1: "zstd", 2: "zstd+dict"}


def sha(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def region_names(regions):
    seen, out = {}, []
    for r in regions:
        base = KINDS.get(r["kind"], "kind-%d" % r["kind"])
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append(base if n == 0 else "%s.%d" % (base, n))
    return out


def go_g(x: float) -> str:
    """Go's %g for a float64: shortest digits, exponent form below 1e-4 or
    from 1e6 on."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    for p in range(1, 18):
        e = "%.*e" % (p - 1, x)
        if float(e) == x:
            break
    exp = int(e.split("e")[1])
    if exp < -4 or exp >= 6:
        return e
    return "%.*f" % (max(p - 1 - exp, 0), x)


def inspect_text(name, truth):
    """`tsumugi inspect` as spec Part C lays it out, from the truth file."""
    h = truth["header"]
    lines = ["file:     " + name, "version:  %d.%d" % (h["version_major"], h["version_minor"]),
             "docs:     %d" % h["doc_count"], "flags:    " + (",".join(h["flag_names"]) or "(none)")]
    if h["node_base"]:
        lines.append("node_base:%d" % h["node_base"])
    if h["build_epoch"]:
        lines.append("epoch:    %d" % h["build_epoch"])
    lines.append("regions:")
    rows = [["  kind", "codec", "on-disk", "raw", "ratio"]]
    for r in truth["regions"]:
        ratio = r["length"] / r["raw_length"] if r["raw_length"] else 1.0
        rows.append(["  " + KINDS.get(r["kind"], "unknown"), CODECS.get(r["codec"], "unknown"),
                     str(r["length"]), str(r["raw_length"]), "%.2fx" % ratio])
    widths = [max(len(row[i]) for row in rows) + 2 for i in range(4)]
    for row in rows:
        lines.append("".join(c.ljust(w) for c, w in zip(row, widths)) + row[4])
    stats = truth["footer"]["stats"]
    if stats:
        lines.append("stats:")
    for k in sorted(stats, key=lambda k: k.encode()):
        bits = int(stats[k]["bits"], 16)
        if k in ("analyzer_hash", "build_config_hash"):
            v = "0x%016x" % bits
        else:
            v = go_g(struct.unpack("<d", struct.pack("<Q", bits))[0])
        lines.append("  %s %s" % (k.ljust(18), v))
    return "\n".join(lines) + "\n"


def check_csv(view, npy, node_base):
    text = (view / "features.csv").read_text()
    lines = text.splitlines()
    assert len(lines) == npy.shape[0] + 1 and lines[0].split(",")[0] == "id"
    for d, line in enumerate(lines[1:]):
        cells = line.split(",")
        assert int(cells[0]) == node_base + d
        got = np.array([float(c) for c in cells[1:]], dtype=np.float32)
        assert np.array_equal(got, npy[d], equal_nan=True)  # float32 round trip
    return lines[0].split(",")[1:]


@pytest.mark.parametrize("name", GOLD)
def test_fixture_matches_truth(name, mount):
    truth = json.loads((TSM / (name + ".truth.json")).read_text())
    assert truth["expect"]["open_error"] is None
    mnt = mount(TSM)
    assert sha(read_through(mnt / name)) == truth["sha256"]
    view = mnt / name[: -len(".tsumugi")]
    assert view.is_dir()
    info = json.loads((view / ".shardfs" / "info.json").read_text())
    for k, v in truth["header"].items():
        assert info["header"][k] == v, k
    assert (view / ".shardfs" / "info.txt").read_text() == inspect_text(name, truth)
    assert (view / ".shardfs" / "verify").read_text().startswith("status: ok\n")
    names = region_names(truth["regions"])
    listed = sorted(p.name for p in (view / "regions").iterdir())
    want = sorted(names + [n + ".zst" for n, r in zip(names, truth["regions"]) if r["codec"] in (1, 2)])
    assert listed == want
    for n, r in zip(names, truth["regions"]):
        data = read_through(view / "regions" / n, chunk=4096)
        assert (view / "regions" / n).stat().st_size == r["raw_length"]
        assert sha(data) == r["decoded_sha256"]
        if r["codec"] in (1, 2):
            assert sha(read_through(view / "regions" / (n + ".zst"))) == r["stored_sha256"]
    fwd = [i["forward"] for i in truth["inner"] if i and "forward" in i]
    fea = [i["feature"] for i in truth["inner"] if i and "feature" in i]
    assert (view / "docs").is_dir() == bool(fwd)
    assert (view / "features.npy").exists() == bool(fea)
    node_base = truth["header"]["node_base"]
    for f in fwd:
        docs = sorted(int(p.name) for p in (view / "docs").iterdir())
        assert docs == list(range(f["rows"]))
        lines = (view / "docs.jsonl").read_text().splitlines()
        assert len(lines) == f["rows"]
        for col, vals in f["values"].items():
            for d in range(f["rows"]):
                got = (view / "docs" / str(d) / col).read_bytes()
                row = json.loads(lines[d])
                assert row["id"] == node_base + d
                if isinstance(vals, dict):
                    h = vals["hex"][d]
                    assert got == (h.encode() if col == "doc_id" else bytes.fromhex(h))
                    if col == "doc_id":
                        assert row[col] == h
                else:
                    assert got == vals[d].encode()
                    assert row[col] == vals[d]
    for f in fea:
        a = np.load(view / "features.npy", mmap_mode="r")
        assert a.dtype == np.dtype("<f4") and a.shape == (f["rows"], f["col_count"])
        want = np.array(f["dequantized"], dtype=np.float64).astype(np.float32)
        assert np.allclose(a, want, rtol=1e-6, atol=0)
        check_csv(view, a, node_base)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("tsumugi") / "src"
    subprocess.run([sys.executable, str(WRITERS / "tsumugi_writer.py"), "--out", str(out)], check=True)
    return out


def test_written_shards(written, mount):
    mnt = mount(written)
    expects = sorted(written.glob("*.expect.json"))
    assert len(expects) == 6
    for x in expects:
        name = x.name[: -len(".expect.json")]
        e = json.loads(x.read_text())
        view = mnt / name[: -len(".tsumugi")]
        for r in e["regions"]:
            p = view / "regions" / r["name"]
            assert p.stat().st_size == r["size"]
            assert sha(read_through(p)) == r["sha256"]
            if r["codec"] in (1, 2):
                assert sha(read_through(view / "regions" / (r["name"] + ".zst"))) == r["stored_sha256"]
        if "docs" in e:
            d = e["docs"]
            assert len(list((view / "docs").iterdir())) == d["rows"]
            lines = (view / "docs.jsonl").read_text().splitlines()
            assert len(lines) == d["rows"]
            for col, vals in d["files"].items():
                for i, h in enumerate(vals):
                    p = view / "docs" / str(i) / col
                    want = bytes.fromhex(h)
                    assert p.stat().st_size == len(want)
                    assert read_through(p, chunk=5000) == want
                    got = json.loads(lines[i])[col]
                    if col == "doc_id" or d["types"][d["columns"].index(col)] == 1:
                        assert got == want.decode()
                    else:
                        assert got == base64.b64encode(want).decode()
        else:
            assert not (view / "docs").exists()
        if "features" in e:
            a = np.load(view / "features.npy", mmap_mode="r")
            want = np.array(e["features"]["values"], dtype=np.float32).reshape(a.shape)
            assert a.shape[1] == len(e["features"]["names"])
            assert np.allclose(a, want, rtol=1e-6, atol=0)
            assert check_csv(view, a, e["node_base"]) == e["features"]["names"]
        assert (view / ".shardfs" / "verify").read_text().startswith("status: ok\n")


def test_head_of_big_body_decodes_one_block(written, mount):
    mnt = mount(written)
    e = json.loads((written / "big_body.tsumugi.expect.json").read_text())
    want = bytes.fromhex(e["docs"]["files"]["body"][1])
    body = mnt / "big_body" / "docs" / "1" / "body"
    assert body.stat().st_size == len(want) > 1 << 19
    stats = mnt / ".shardfs" / "stats.json"
    before = json.loads(stats.read_text())["cache"]["bytes_decoded"]
    head = subprocess.run(["head", "-c", "100", str(body)], capture_output=True, check=True).stdout
    assert head == want[:100]
    after = json.loads(stats.read_text())["cache"]["bytes_decoded"]
    assert 0 < after - before <= 2 * 16384


def corrupt(dst):
    """Copies of gold_prod broken in the ways spec A11 lists, plus one whose
    forward region fails its CRC."""
    good = (TSM / "gold_prod.tsumugi").read_bytes()

    def reseal(b):
        b = bytearray(b)
        b[56:60] = struct.pack("<I", crc32c(bytes(b[:56])))
        return bytes(b)

    cases = {
        "short.tsumugi": (good[:79], "short_file"),
        "torn.tsumugi": (good[:-1], "bad_magic"),
        "footer_crc.tsumugi": (good[:-40] + bytes([good[-40] ^ 1]) + good[-39:], "footer_crc"),
        "header_crc.tsumugi": (good[:16] + bytes([good[16] ^ 1]) + good[17:], "header_crc"),
        "version.tsumugi": (reseal(good[:4] + b"\x02" + good[5:]), "bad_version"),
        "footer_offset.tsumugi": (reseal(good[:24] + bytes([good[24] ^ 1]) + good[25:]), "corrupt_footer"),
    }
    for n, (b, _) in cases.items():
        (dst / n).write_bytes(b)
    bad = bytearray(good)
    bad[5471 + 3000] ^= 0x40
    (dst / "region_crc.tsumugi").write_bytes(bytes(bad))
    return {n: why for n, (_, why) in cases.items()}


def test_corrupt_shards(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    reasons = corrupt(src)
    mnt = mount(src)
    listed = set(p.name for p in mnt.iterdir())
    # a footer whose CRC fails is found when the view is entered (the
    # listing reads only the header and trailer): an empty view says why;
    # every other case fails the listing's check and gets no view
    late = "footer_crc.tsumugi"
    assert os.listdir(mnt / late[: -len(".tsumugi")]) == []
    verify = (mnt / "footer_crc" / ".shardfs" / "verify").read_text()
    assert verify.startswith("status: failed\n") and "footer_crc" in verify
    errors = (mnt / ".shardfs" / "errors").read_text()
    for n, why in reasons.items():
        assert n in listed and (n[: -len(".tsumugi")] in listed) == (n == late)
        assert read_through(mnt / n) == (src / n).read_bytes()
        line = [l for l in errors.splitlines() if n in l]
        assert line and why in line[0], (n, errors)
    view = mnt / "region_crc"
    assert view.is_dir()
    f = view / "regions" / "forward"
    assert f.stat().st_size == 49962
    with pytest.raises(OSError) as ei:
        read_through(f)
    assert ei.value.errno == errno.EIO
    with pytest.raises(OSError) as ei:
        read_through(view / "docs" / "0" / "url")
    assert ei.value.errno == errno.EIO
    assert sha(read_through(view / "regions" / "lexical")) == json.loads(
        (TSM / "gold_prod.tsumugi.truth.json").read_text())["regions"][0]["decoded_sha256"]
    verify = (view / ".shardfs" / "verify").read_text()
    assert verify.startswith("status: failed\n") and "region CRC mismatch" in verify


def with_region(good, i, data):
    """A copy of `good` whose region i holds `data`, stored uncompressed
    after the other regions, with descriptor, footer and header resealed."""
    flen = struct.unpack_from("<Q", good, len(good) - 16)[0]
    fstart = len(good) - 16 - flen
    body, footer, sections, p = bytearray(good[:fstart]), good[fstart:fstart + flen], [], 0
    while p < len(footer):
        tag, n = footer[p], struct.unpack_from("<I", footer, p + 1)[0]
        sections.append([tag, bytearray(footer[p + 5:p + 5 + n])])
        p += 5 + n
    table = next(s for t, s in sections if t == 2)
    struct.pack_into("<BBHQQQII", table, 36 * i, table[36 * i], 0, 0, len(body), len(data),
                     len(data), crc32c(data), 0)
    body += data
    footer = b"".join(bytes([t]) + struct.pack("<I", len(s)) + bytes(s) for t, s in sections)
    out = body + footer + struct.pack("<QI", len(footer), crc32c(footer)) + b"TSM1"
    struct.pack_into("<QQ", out, 24, len(body), len(footer))
    struct.pack_into("<I", out, 56, crc32c(bytes(out[:56])))
    return bytes(out)


def fea1_with_column(col, width, offset):
    """gold_prod's FEA1 region with one column-table entry changed, its
    header CRC resealed."""
    import zstandard
    good = (TSM / "gold_prod.tsumugi").read_bytes()
    fea = bytearray(zstandard.ZstdDecompressor().decompress(good[4089:4089 + 1382], max_output_size=1458))
    fea[20 + 8 * col + 1] = width
    struct.pack_into("<H", fea, 20 + 8 * col + 4, offset)
    ncols = struct.unpack_from("<H", fea, 8)[0]
    struct.pack_into("<I", fea, 20 + 22 * ncols, crc32c(bytes(fea[:20 + 22 * ncols])))
    return with_region(good, 1, bytes(fea))


def test_bad_feature_column_is_reported(tmp_path, mount):
    """A feature column of impossible width or offset: features.* fail with
    EIO and verify names the column as stored (not freed memory)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "w0.tsumugi").write_bytes(fea1_with_column(0, 0, 0))
    (src / "o5.tsumugi").write_bytes(fea1_with_column(5, 1, 28))
    mnt = mount(src)
    for name, why in (("w0", "feature column 0 has width 0 at offset 0 of a 28-byte row"),
                      ("o5", "feature column 5 has width 1 at offset 28 of a 28-byte row")):
        view = mnt / name
        for f in ("features.npy", "features.csv"):
            with pytest.raises(OSError) as ei:
                read_through(view / f)
            assert ei.value.errno == errno.EIO
        verify = (view / ".shardfs" / "verify").read_text()
        assert verify.startswith("status: failed\n") and why in verify, verify
        truth = json.loads((TSM / "gold_prod.tsumugi.truth.json").read_text())
        assert sha(read_through(view / "regions" / "lexical")) == truth["regions"][0]["decoded_sha256"]


def with_descriptor(good, i, offset=None, raw_length=None):
    """A copy of `good` with region i's descriptor changed, resealed."""
    b = bytearray(good)
    flen = struct.unpack_from("<Q", b, len(b) - 16)[0]
    fstart, p = len(b) - 16 - flen, len(b) - 16 - flen
    while b[p] != 2:
        p += 5 + struct.unpack_from("<I", b, p + 1)[0]
    d = p + 5 + 36 * i
    if offset is not None:
        struct.pack_into("<Q", b, d + 4, offset)
    if raw_length is not None:
        struct.pack_into("<Q", b, d + 20, raw_length)
    struct.pack_into("<I", b, len(b) - 8, crc32c(bytes(b[fstart:fstart + flen])))
    return bytes(b)


def test_bad_descriptor_keeps_its_files(tmp_path, mount):
    """A zstd region whose descriptor fails a check still lists both its
    files (docs/design.md §3.4), and both fail with EIO; the other regions read."""
    good = (TSM / "gold_prod.tsumugi").read_bytes()
    src = tmp_path / "src"
    src.mkdir()
    (src / "outside.tsumugi").write_bytes(with_descriptor(good, 0, offset=70000))
    (src / "huge.tsumugi").write_bytes(with_descriptor(good, 0, raw_length=1 << 40))
    mnt = mount(src)
    truth = json.loads((TSM / "gold_prod.tsumugi.truth.json").read_text())
    for name in ("outside", "huge"):
        regions = mnt / name / "regions"
        assert sorted(p.name for p in regions.iterdir()) == [
            "feature", "feature.zst", "forward", "graph", "graph.zst", "lexical", "lexical.zst",
            "vector"]
        for f in ("lexical", "lexical.zst"):
            with pytest.raises(OSError) as ei:
                read_through(regions / f)
            assert ei.value.errno == errno.EIO
        assert sha(read_through(regions / "graph")) == truth["regions"][3]["decoded_sha256"]
        verify = (mnt / name / ".shardfs" / "verify").read_text()
        assert verify.startswith("status: failed\n") and "regions/lexical" in verify


def test_info_txt_pads_stats_by_characters(tmp_path, mount):
    """`tsumugi inspect` pads stat keys with Go's %-18s, which counts
    characters, not bytes."""
    from tsumugi_writer import shard
    src = tmp_path / "src"
    src.mkdir()
    data, _ = shard([], 0, stats={"größe": 1.5, "δ": 2.0})
    (src / "s.tsumugi").write_bytes(data)
    mnt = mount(src)
    text = (mnt / "s" / ".shardfs" / "info.txt").read_text()
    stats = text[text.index("stats:\n") + 7:]
    assert stats == ("  doc_count" + " " * 10 + "0\n"
                     "  größe" + " " * 14 + "1.5\n"
                     "  δ" + " " * 18 + "2\n")
