"""Shardlake storage roots through the mount: the fixture roots against
their truth files, aliases as symlinks, and roots from our writer with
broken shards, manifests and aliases."""
import hashlib
import shutil
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, WRITERS, read_through

ROOTS = ["main", "legacy"]


def sha(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def load(p: Path):
    return np.load(p, mmap_mode="r")


def view_of(mnt: Path, key: str) -> Path:
    """The view directory beside a shard: its name minus ".sidx"."""
    return mnt / key[: -len(".sidx")]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("shardlake") / "root"
    subprocess.run([sys.executable, str(WRITERS / "shardlake_writer.py"), str(out)], check=True)
    return out, json.loads((out / "truth.json").read_text())


@pytest.mark.parametrize("root", ROOTS)
def test_fixture_shards_match_truth(root, mount):
    src = FIXTURES / "shardlake" / root
    truth = json.loads((FIXTURES / "shardlake" / f"{root}.truth.json").read_text())
    mnt = mount(src)
    checked = 0
    for iv, idx in truth["indexes"].items():
        for s in idx["shards"]:
            shard = mnt / s["artifact_key"]
            # the shard itself still shows through, byte for byte
            assert sha(read_through(shard)) == s["file_sha256"]
            v = view_of(mnt, s["artifact_key"])
            n, dims, c = s["vector_count"], s["dims"], s["centroid_count"]
            cen = load(v / "centroids.npy")
            assert cen.dtype == np.dtype("<f4") and cen.shape == (c, dims)
            assert sha(np.ascontiguousarray(cen).tobytes()) == s["centroids_sha256"]
            want_c = np.array(s["centroids"], dtype="<f4").reshape(c, dims)
            assert np.array_equal(cen, want_c, equal_nan=True)
            rec = load(v / "records.npy")
            assert rec.shape == (n,) and rec.dtype.names[0] == "id"
            assert sha(rec.tobytes()) == s["records_sha256"]
            ids = load(v / "ids.npy")
            assert ids.dtype == np.dtype("<u8") and ids.shape == (n,)
            assert sha(ids.tobytes()) == s["ids_sha256"]
            assert np.array_equal(ids, rec["id"])
            if "ids" in s:
                assert ids.tolist() == s["ids"]
            txt = (v / "ids.txt").read_text()
            assert txt == "".join(f"{i}\n" for i in ids.tolist())
            if s["format_version"] == 1:
                vec = load(v / "vectors.npy")
                assert vec.shape == (n, dims) and vec.dtype == np.dtype("<f4")
                assert sha(vec.tobytes()) == s["vectors_sha256"]
                assert np.array_equal(vec, rec["vector"].reshape(n, dims), equal_nan=True)
                assert not (v / "codes.npy").exists()
            else:
                codes = load(v / "codes.npy")
                assert codes.shape == (n, s["pq_m"]) and codes.dtype == np.uint8
                assert sha(codes.tobytes()) == s["codes_sha256"]
                recon = load(v / "reconstructed.npy")
                assert recon.shape == (n, dims)
                assert sha(recon.tobytes()) == s["reconstructed_sha256"]
            verify = (v / ".shardfs" / "verify").read_text().splitlines()
            assert verify[0] == "status: ok", verify
            assert any("trailing" in line for line in verify[1:]) == (s["trailing_bytes"] > 0)
            info = json.loads((v / ".shardfs" / "info.json").read_text())
            assert info["header"]["shard_id"] == s["shard_id"]
            assert info["manifest"]["entry"]["artifact_key"] == s["artifact_key"]
            assert s["fingerprint"] in (v / ".shardfs" / "info.txt").read_text()
            checked += 1
    assert checked == sum(len(i["shards"]) for i in truth["indexes"].values())


@pytest.mark.parametrize("root", ROOTS)
def test_fixture_aliases(root, mount):
    truth = json.loads((FIXTURES / "shardlake" / f"{root}.truth.json").read_text())
    mnt = mount(FIXTURES / "shardlake" / root)
    names = set(os.listdir(mnt / "aliases"))
    for alias, a in truth["aliases"].items():
        link = mnt / "aliases" / alias
        assert alias in names and f"{alias}.json" in names
        assert link.is_symlink()
        assert os.readlink(link) == f"../indexes/{a['index_version']}"
        assert link.exists() == (not a["dangling"])
        if not a["dangling"]:
            # the link resolves inside the mount, to the index with its views
            assert (link / "manifest.json").read_bytes() == \
                (FIXTURES / "shardlake" / root / "indexes" / a["index_version"] / "manifest.json").read_bytes()
    errors = (mnt / ".shardfs" / "errors").read_text()
    for alias, a in truth["aliases"].items():
        assert (f"aliases/{alias}.json" in errors) == a["dangling"], errors


def test_cd_into_alias(mount):
    mnt = mount(FIXTURES / "shardlake" / "main")
    here = os.getcwd()
    try:
        os.chdir(mnt / "aliases" / "latest" / "shards")
        names = sorted(os.listdir("."))
        assert "shard-0000.sidx" in names and "shard-0000" in names
        assert load(Path("shard-0000") / "ids.npy").shape[0] > 0
    finally:
        os.chdir(here)


def test_written_root(written, mount):
    src, truth = written
    mnt = mount(src)
    for iv, idx in truth["indexes"].items():
        dims = idx["dims"]
        for s in idx["shards"]:
            v = view_of(mnt, s["key"])
            n = len(s["ids"])
            assert load(v / "ids.npy").tolist() == s["ids"]
            assert (v / "ids.txt").read_text().split() == [str(i) for i in s["ids"]]
            cen = load(v / "centroids.npy")
            assert np.array_equal(cen, np.array(s["centroids"], dtype="<f4"))
            rec = load(v / "records.npy")
            assert rec.shape == (n,) and rec["id"].tolist() == s["ids"]
            if s["format_version"] == 1:
                want = np.array(s["vectors"], dtype="<f4").reshape(n, dims)
                assert np.array_equal(load(v / "vectors.npy"), want)
                assert np.array_equal(rec["vector"].reshape(n, dims), want)
            else:
                m = len(s["codes"][0]) if n else load(v / "codes.npy").shape[1]
                assert np.array_equal(load(v / "codes.npy"),
                                      np.array(s["codes"], dtype=np.uint8).reshape(n, m))
                want = np.array(s["reconstructed"], dtype="<f4").reshape(n, dims)
                assert np.array_equal(load(v / "reconstructed.npy"), want)
            assert (v / ".shardfs" / "verify").read_text() == "status: ok\n"
    for alias, target in truth["aliases"].items():
        assert os.readlink(mnt / "aliases" / alias) == f"../indexes/{target}"


def test_records_and_centroids_are_zero_copy(written, mount):
    src, truth = written
    mnt = mount(src)
    s = truth["indexes"]["idx-cos-8"]["shards"][0]
    v = view_of(mnt, s["key"])
    stats = mnt / ".shardfs" / "stats.json"
    for name in ("records.npy", "centroids.npy"):
        before = json.loads(stats.read_text())["bytes_served"]
        data = read_through(v / name)
        after = json.loads(stats.read_text())["bytes_served"]
        header = 10 + int.from_bytes(data[8:10], "little")
        assert header % 64 == 0
        # everything past the .npy header comes straight from the shard's mapping
        assert after["from_mappings"] - before["from_mappings"] == len(data) - header
        assert after["from_cache"] == before["from_cache"]


def test_broken_inputs_are_reported(written, mount):
    src, truth = written
    mnt = mount(src)
    bad = truth["bad"]
    shards = mnt / "indexes" / "idx-bad" / "shards"
    listed = set(os.listdir(shards))
    for key in bad["fail_open"]:
        p = mnt / key
        # the file passes through, gets no view, and is reported
        assert p.read_bytes() == (src / key).read_bytes()
        stem = p.name.rsplit(".", 1)[0]
        assert stem not in set(os.listdir(p.parent)), key
    errors = (mnt / ".shardfs" / "errors").read_text()
    for key in bad["fail_open"]:
        assert key in errors, (key, errors)
    assert "truncated" in errors and "overflow" in errors
    # the intact shard beside them still has its view; its manifest does
    # not parse, which the log says once the view is entered (opened) and
    # verify reports, without breaking the other files
    v = view_of(mnt, bad["intact"][0])
    assert "shard-0000" in listed
    assert load(v / "ids.npy").tolist() == [0, 1, 2, 3, 4]
    assert "manifest.json: not JSON" in (mnt / ".shardfs" / "errors").read_text()
    verify = (v / ".shardfs" / "verify").read_text().splitlines()
    assert verify[0] == "status: failed" and "not JSON" in verify[1]
    assert json.loads((v / ".shardfs" / "info.json").read_text())["manifest"]["error"]
    # and the rest of the root is browsable
    assert os.readlink(mnt / "aliases" / "latest") == "../indexes/idx-cos-8"
    assert (mnt / "aliases" / "latest" / "shards" / "shard-0000" / "ids.npy").exists()
    assert not os.path.lexists(mnt / "aliases" / "escape")
    assert not os.path.lexists(mnt / "aliases" / "broken")


def test_sample_root(tmp_path, mount):
    out = tmp_path / "sample"
    subprocess.run([sys.executable, str(WRITERS / "shardlake_writer.py"), "--sample", str(out)],
                   check=True)
    mnt = mount(out)
    assert load(mnt / "aliases" / "pq" / "shards" / "shard-0000" / "reconstructed.npy").shape[1] == 8
    assert (mnt / "aliases" / "latest" / "shards" / "shard-0001" / ".shardfs" / "verify") \
        .read_text() == "status: ok\n"


def writer_module():
    sys.path.insert(0, str(WRITERS))
    import shardlake_writer
    return shardlake_writer


def same_array(path, want) -> bool:
    """Loads with mmap here, so that no mapping outlives the check (a failed
    assert would keep it in the traceback and the mount busy)."""
    got = load(path)
    return got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_gathered_views_larger_than_the_cache(tmp_path, mount):
    """ids/vectors/codes/reconstructed of a shard bigger than --cache-size:
    right bytes, and each read copies only its own range (no whole-array
    gather per 1 MiB read, which made reading quadratic and memory unbounded)."""
    sw = writer_module()
    rnd = np.random.default_rng(11)
    d = tmp_path / "src" / "indexes" / "big"
    (d / "shards").mkdir(parents=True)
    n, dims = 9000, 128
    vecs = rnd.normal(size=(n, dims)).astype("<f4")
    ids = rnd.choice(2**50, n, replace=False).astype("<u8")
    (d / "shards" / "shard-0000.sidx").write_bytes(
        sw.shard_bytes(0, vecs[:1], ids, vectors=vecs))
    m, k, sub = 4, 16, dims // 4
    book = rnd.normal(size=(m, k, sub)).astype("<f4")
    (d / "pq_codebook.bin").write_bytes(
        b"SLKPQCB\0" + struct.pack("<IIIII", 1, dims, m, k, sub) + book.tobytes())
    codes = rnd.integers(0, k, (n, m)).astype("u1")
    (d / "shards" / "shard-0001.sidx").write_bytes(
        sw.shard_bytes(1, vecs[:1], ids, codes=codes, pq_k=k))
    recon = np.concatenate([book[j][codes[:, j]] for j in range(m)], axis=1)
    mnt = mount(tmp_path / "src", "--cache-size", "1M")
    stats = mnt / ".shardfs" / "stats.json"
    want = {"shard-0000/ids.npy": ids, "shard-0000/vectors.npy": vecs,
            "shard-0001/codes.npy": codes, "shard-0001/reconstructed.npy": recon}
    served = 0
    before = json.loads(stats.read_text())["cache"]["bytes_decoded"]
    for name, arr in want.items():
        p = mnt / "indexes" / "big" / "shards" / name
        assert same_array(p, arr), name
        data = read_through(p, chunk=12345)
        assert len(data) == os.stat(p).st_size
        served += len(data)
    decoded = json.loads(stats.read_text())["cache"]["bytes_decoded"] - before
    assert decoded <= served, (decoded, served)


def test_views_never_named_dot_or_dotdot(tmp_path, mount):
    """`..sidx` and `...sidx` would name their views `.` and `..` (and
    `aliases/..json` its link `.`): those names are always taken, so the
    view is `<file>.d` (docs/design.md §3.1)."""
    sw = writer_module()
    src = tmp_path / "src"
    (src / "x").mkdir(parents=True)
    raw = sw.shard_bytes(0, np.ones((1, 2), "<f4"), np.arange(2), vectors=np.zeros((2, 2), "<f4"))
    for name in ("..sidx", "...sidx"):
        (src / "x" / name).write_bytes(raw)
    (src / "indexes" / "v").mkdir(parents=True)
    (src / "aliases").mkdir()
    for name in ("..json", "...json"):
        (src / "aliases" / name).write_text(sw.pretty({"alias": "x", "index_version": "v"}))
    mnt = mount(src)
    names = os.listdir(mnt / "x")
    assert sorted(names) == ["...sidx", "...sidx.d", "..sidx", "..sidx.d"], names
    assert load(mnt / "x" / "..sidx.d" / "ids.npy").tolist() == [0, 1]
    assert load(mnt / "x" / "...sidx.d" / "ids.npy").tolist() == [0, 1]
    links = sorted(os.listdir(mnt / "aliases"))
    assert links == ["...json", "...json.d", "..json", "..json.d"], links
    assert os.readlink(mnt / "aliases" / "..json.d") == "../indexes/v"


def test_shard_at_the_top_reads_nothing_outside_src(tmp_path, mount):
    # the index directory holds the manifest, but only its shards/ is mounted
    idx = tmp_path / "idx"
    shutil.copytree(FIXTURES / "shardlake" / "main" / "indexes" / "idx-a-cos", idx)
    src = idx / "shards"
    name = sorted(p for p in os.listdir(src) if p.endswith(".sidx"))[0]
    inside = mount(idx)
    assert read_through(inside / "shards" / name[:-5] / ".shardfs" / "verify") \
        .startswith(b"status: ok")
    top = mount(src)
    verify = read_through(top / name[:-5] / ".shardfs" / "verify").decode().splitlines()
    # without its manifest the shard is intact but not compared: a warning
    assert verify[0] == "status: ok"
    assert any(l.startswith("warning: no manifest") and "outside the mounted directory" in l
               for l in verify[1:])
    # the arrays themselves still read
    ids = np.load(top / name[:-5] / "ids.npy", mmap_mode="r")
    assert ids.shape[0] == np.load(inside / "shards" / name[:-5] / "ids.npy").shape[0]
