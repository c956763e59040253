"""Mounted tests of the taridx fold view (docs/design.md §3.7, docs/specs/taridx.md):
every fixture fold against EXPECTED.json and against what Python's tarfile
reads from the shards, flat-name lookup before any listing, listings,
.shardfs/ metadata, the index builder, and bad input. Expected values come
from the fixtures, tarfile and the test-data writer, never from the view."""
import errno
import hashlib
import json
import os
import pty
import shutil
import subprocess
import sys
import tarfile

import pytest

from conftest import FIXTURES, TOOLS, WRITERS, read_through, shown_path

sys.path.insert(0, str(WRITERS))
import taridx_writer as tw  # noqa: E402

TX = FIXTURES / "taridx"
EXPECTED = json.loads((TX / "EXPECTED.json").read_text())
FOLDS = [(case, fold) for case, c in EXPECTED["cases"].items() for fold in c["folds"]]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def expected_members(case, fold):
    """{shown path: payload} of the regular members a verifying index row
    points at, read with tarfile; the later of two equal paths wins."""
    f = EXPECTED["cases"][case]["folds"][fold]
    good = {(r["tar"], r["offset"]) for r in f["rows"]
            if r["header_stem_hashes_to_keyhash"] and r["tar"] == f["tars_in_fid_order"][r["fid"]]}
    out = {}
    for tar in f["tars_in_fid_order"]:
        with tarfile.open(TX / case / tar, encoding="utf-8", errors="surrogateescape") as t:
            for m in t.getmembers():
                if (tar, m.offset_data - 512) not in good:
                    continue
                if m.isreg():
                    out[shown_path(m.name)] = t.extractfile(m).read()
                elif m.islnk():
                    out[shown_path(m.name)] = t.extractfile(m).read()
    return out


@pytest.mark.parametrize("case,fold", FOLDS)
def test_fixture_members_and_rows(mount, case, fold):
    mnt = mount(TX / case)
    f = EXPECTED["cases"][case]["folds"][fold]
    view = mnt / fold
    for r in f["rows"]:
        assert sha(read_through(view / ".shardfs" / "rows" / str(r["row"]))) == r["payload_sha256"]
    want = expected_members(case, fold)
    assert want or case == "emptyshard"
    for path, data in want.items():
        assert (view / path).stat().st_size == len(data)
        assert read_through(view / path, chunk=333) == data
    # every member once, with its exact size, and nothing else but links
    seen = {}
    for root, dirs, files in os.walk(view):
        for n in files:
            p = os.path.join(root, n)
            if not os.path.islink(p):
                seen[os.path.relpath(p, view)] = os.stat(p).st_size
    assert seen == {p: len(d) for p, d in want.items()}
    # the tars still show through unchanged
    for tar in f["tars_in_fid_order"]:
        assert read_through(mnt / tar) == (TX / case / tar).read_bytes()


def test_flat_lookup_before_listing(mount):
    mnt = mount(TX / "crash")
    rows = EXPECTED["cases"]["crash"]["folds"]["pt"]["rows"]
    for r in rows:
        # colliding stems resolve through the crash table
        assert sha(read_through(mnt / "pt" / r["member_name"])) == r["payload_sha256"]
    for name in ("nothere.jpg", "482abffa99c209e7.png", "zzz.JPG", "zzz"):
        with pytest.raises(FileNotFoundError):
            os.stat(mnt / "pt" / name)
    assert sorted(os.listdir(mnt / "pt")) == sorted(r["member_name"] for r in rows)


def test_links_in_edge(mount):
    mnt = mount(TX / "edge")
    assert os.readlink(mnt / "edge" / "d1" / "link.jpg") == "a.jpg"
    assert read_through(mnt / "edge" / "d1" / "hard.cls") == read_through(mnt / "edge" / "d1" / "a.cls")
    assert not (mnt / "edge" / "p" / "PaxHeaders").exists()


def test_info_and_verify(mount):
    mnt = mount(TX / "small")
    info = json.loads((mnt / "train" / ".shardfs" / "info.json").read_text())
    f = EXPECTED["cases"]["small"]["folds"]["train"]
    assert info["rows"] == f["header"]["n_rows"]
    assert info["samples"] == f["header"]["n_stems"]
    assert info["extensions"] == f["extensions"]
    assert [s["name"] for s in info["shards"]] == f["tars_in_fid_order"]
    assert [s["size"] for s in info["shards"]] == [(TX / "small" / t).stat().st_size
                                                   for t in f["tars_in_fid_order"]]
    assert info["contiguous"] is True
    assert (mnt / "train" / ".shardfs" / "verify").read_text() == "status: ok\n"
    txt = (mnt / "train" / ".shardfs" / "info.txt").read_text()
    assert "rows: 117\n" in txt and txt.endswith("\n")
    assert ".shardfs" not in os.listdir(mnt / "train")
    assert len(os.listdir(mnt / "train" / ".shardfs" / "rows")) == 117


def test_verify_reports_shifted_fids(mount):
    mnt = mount(TX / "emptyshard")
    rep = (mnt / "es" / ".shardfs" / "verify").read_text().splitlines()
    assert rep[0] == "status: failed"
    assert any("es_0001.tar" in line and "empty" in line for line in rep)


@pytest.mark.parametrize("case,fold", FOLDS)
def test_builder_matches_upstream(tmp_path, case, fold):
    d = tmp_path / case
    shutil.copytree(TX / case, d)
    os.chmod(d, 0o755)
    (d / f"{fold}.taridx").unlink()
    p = subprocess.run([str(TOOLS / "shardfs-taridx"), str(d), fold], capture_output=True)
    assert p.returncode == 0, p.stderr
    assert (d / f"{fold}.taridx").read_bytes() == (TX / case / f"{fold}.taridx").read_bytes()
    assert not [n for n in os.listdir(d) if n.startswith(".")]


def test_builder_out_elsewhere(tmp_path):
    """--out OUT writes the same index into OUT and nothing beside the tars
    (a dataset directory its readers cannot write)."""
    case, fold = FOLDS[0]
    d, out = tmp_path / "data", tmp_path / "idx"
    shutil.copytree(TX / case, d)
    (d / f"{fold}.taridx").unlink()
    before = sorted(os.listdir(d))
    out.mkdir()
    p = subprocess.run([str(TOOLS / "shardfs-taridx"), "--out", str(out), str(d), fold],
                       capture_output=True)
    assert p.returncode == 0, p.stderr
    assert f"into {out}/{fold}.taridx".encode() in p.stderr
    assert (out / f"{fold}.taridx").read_bytes() == (TX / case / f"{fold}.taridx").read_bytes()
    assert sorted(os.listdir(d)) == before and os.listdir(out) == [f"{fold}.taridx"]
    p = subprocess.run([str(TOOLS / "shardfs-taridx"), "--out", str(tmp_path / "none"), str(d), fold],
                       capture_output=True)
    assert p.returncode == 1 and str(tmp_path / "none").encode() in p.stderr
    assert sorted(os.listdir(d)) == before


def test_builder_progress_and_errors(tmp_path):
    tw.write_sample(tmp_path)
    want = (tmp_path / "demo.taridx").read_bytes()
    (tmp_path / "demo.taridx").unlink()
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(str(TOOLS / "shardfs-taridx"), ["shardfs-taridx", str(tmp_path), "demo"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    assert b"\r[" in out and b"2/2 tars" in out
    assert (tmp_path / "demo.taridx").read_bytes() == want
    # a damaged header is refused with a message naming the tar, the offset and
    # the cause, and nothing is written
    (tmp_path / "demo.taridx").unlink()
    with open(tmp_path / "demo_0001.tar", "r+b") as f:
        f.seek(124)
        f.write(b"zz")
    p = subprocess.run([str(TOOLS / "shardfs-taridx"), str(tmp_path), "demo"], capture_output=True)
    assert p.returncode != 0 and b"demo_0001.tar: cannot index the tar at offset 0: a header block whose checksum fails" in p.stderr
    assert not (tmp_path / "demo.taridx").exists()


def test_bad_input(mount, tmp_path):
    """A row whose payload runs past its tar's end (a flipped bit in its size)
    does not verify (docs/design.md §3.7): its member is neither listed nor found by
    lookup, its rows/ entry keeps the row's size and reads fail EIO, and
    verify reports it."""
    rows = tw.write_fold(tmp_path / "src", "f", tw.sample_samples(8), shard_maxfiles=4)
    src = tmp_path / "src"
    idx = (src / "f.taridx").read_bytes()
    off_arr = int.from_bytes(idx[48:56], "little")
    # the last row claims more bytes than its tar holds
    last = len(rows) - 1
    bad = bytearray(idx)
    size_at = off_arr + 32 * last + 10
    bad[size_at:size_at + 8] = (rows[last]["size"] | 1 << 50).to_bytes(8, "little")
    (src / "f.taridx").write_bytes(bytes(bad))
    # a torn index beside it gets no view
    (src / "g.taridx").write_bytes(idx[:-5])
    (src / "g_0000.tar").write_bytes((src / "f_0000.tar").read_bytes())
    mnt = mount(src)
    assert not (mnt / "g").exists()
    name = rows[last]["name"].decode()
    # neither through the index before any listing, nor in the listing
    assert not (mnt / "f" / name).exists()
    assert name not in os.listdir(mnt / "f")
    assert not (mnt / "f" / name).exists()
    row = mnt / "f" / ".shardfs" / "rows" / str(last)
    assert row.stat().st_size == rows[last]["size"] | 1 << 50
    with pytest.raises(OSError) as ei:
        read_through(row, chunk=1 << 16)
    assert ei.value.errno == errno.EIO
    for r in rows[:-1]:
        assert read_through(mnt / "f" / r["name"].decode()) == r["data"]
    rep = (mnt / "f" / ".shardfs" / "verify").read_text()
    assert rep.startswith("status: failed\n") and f"row {last} " in rep and "runs past the end" in rep, rep
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "g.taridx" in errors and f"f/.shardfs/rows/{last}: " in errors


def test_missing_shard(mount, tmp_path):
    rows = tw.write_fold(tmp_path, "f", tw.sample_samples(8), shard_maxfiles=4)
    (tmp_path / "f_0001.tar").unlink()
    mnt = mount(tmp_path)
    for r in rows:
        p = mnt / "f" / r["name"].decode()
        if r["fid"] == 0:
            assert read_through(p) == r["data"]
        else:
            assert not p.exists()
    rep = (mnt / "f" / ".shardfs" / "verify").read_text()
    assert rep.startswith("status: failed\n") and "removed" in rep


def index_tars(src, fold):
    """Writes <fold>.taridx for src/<fold>_*.tar as upstream's parse_folder
    does (spec §2.3, §7.2): every header block until a zero block is a row,
    keyed by the stem and extension of its 100-byte name field."""
    st = tw.IndexState()
    tars = sorted(n for n in os.listdir(src) if n.startswith(fold + "_") and n.endswith(".tar"))
    for fid, name in enumerate(tars):
        data = (src / name).read_bytes()
        pos = 0
        while pos + 512 <= len(data) and data[pos:pos + 512] != bytes(512):
            hdr = data[pos:pos + 512]
            size = int(hdr[124:136].split(b"\0")[0].strip() or b"0", 8)
            st.add(fid, pos, size, *tw.stem_ext(hdr[:100].split(b"\0")[0]))
            pos += 512 + -(-size // 512) * 512
    (src / f"{fold}.taridx").write_bytes(st.encode())


def test_lookup_of_names_the_index_does_not_key(mount, tmp_path):
    """Every listed entry resolves on a fresh mount before any listing, also
    those whose name no row keys: members renamed by a pax path (Python's
    tarfile writes '?' for non-ASCII bytes in the name field) and
    directories whose names look like key paths."""
    import io
    src = tmp_path / "src"
    src.mkdir()
    with tarfile.open(src / "p_0000.tar", "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in (("café.jpg", b"cafe"), ("plain.jpg", b"plain"), ("naïve.cls", b"1"),
                           ("dir.jpg/inner.cls", b"22")):
            if name.startswith("dir.jpg/"):
                d = tarfile.TarInfo("dir.jpg")
                d.type = tarfile.DIRTYPE
                t.addfile(d)
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    index_tars(src, "p")
    want = {"café.jpg": b"cafe", "plain.jpg": b"plain", "naïve.cls": b"1", "dir.jpg/inner.cls": b"22"}
    mnt = mount(src)
    for path, data in want.items():
        assert read_through(mnt / "p" / path) == data, path
    assert (mnt / "p" / "dir.jpg").is_dir()
    with pytest.raises(FileNotFoundError):
        os.stat(mnt / "p" / "nothere.jpg")
    assert sorted(os.listdir(mnt / "p")) == sorted(["café.jpg", "plain.jpg", "naïve.cls", "dir.jpg"])


def test_shards_changing_beside_a_mounted_fold(mount, tmp_path):
    """The fold's view follows the shards beside its index (fids are ranks):
    a shard added after indexing is reported by verify, and a removed
    shard's members are gone, also when the view was open before."""
    import time
    rows = tw.write_fold(tmp_path, "f", tw.sample_samples(8), shard_maxfiles=4)
    mnt = mount(tmp_path)
    first = next(r for r in rows if r["fid"] == 0)
    last = next(r for r in rows if r["fid"] == 1)
    assert read_through(mnt / "f" / first["name"].decode()) == first["data"]
    assert (mnt / "f" / ".shardfs" / "verify").read_text() == "status: ok\n"
    # a tar added under a temp name and renamed into place
    (tmp_path / ".new.tmp").write_bytes((tmp_path / "f_0001.tar").read_bytes())
    os.rename(tmp_path / ".new.tmp", tmp_path / "f_0002.tar")
    deadline = time.monotonic() + 10
    while True:
        rep = (mnt / "f" / ".shardfs" / "verify").read_text()
        if rep.startswith("status: failed\n") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert rep.startswith("status: failed\n") and "f_0002.tar" in rep, rep
    info = json.loads((mnt / "f" / ".shardfs" / "info.json").read_text())
    assert [s["name"] for s in info["shards"]] == ["f_0000.tar", "f_0001.tar", "f_0002.tar"]
    # a shard removed: its members go, the others stay
    (tmp_path / "f_0002.tar").unlink()
    (tmp_path / "f_0001.tar").unlink()
    deadline = time.monotonic() + 10
    while (mnt / "f" / last["name"].decode()).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (mnt / "f" / last["name"].decode()).exists()
    assert read_through(mnt / "f" / first["name"].decode()) == first["data"]
    rep = (mnt / "f" / ".shardfs" / "verify").read_text()
    assert rep.startswith("status: failed\n") and "removed" in rep, rep


def test_concurrent_first_use(mount, tmp_path):
    """info.json, info.txt and verify are produced outside the view's lock
    while lookups build the (keyhash, crashid) lookup under it: the first
    uses of all of them at once build it once (no leak, no torn lookup)."""
    import threading
    n = 100_000
    tw.write_scale(tmp_path, n, per_shard=n)
    for attempt in range(3):
        mnt = mount(tmp_path)
        view = mnt / "big"
        barrier = threading.Barrier(6)
        results = {}

        def use(what):
            barrier.wait()
            if what.startswith("."):
                results[what] = (view / what).read_bytes()
            else:
                results[what] = read_through(view / what)

        jobs = [".shardfs/info.json", ".shardfs/info.txt", ".shardfs/verify",
                "%08d.txt" % 7, "%08d.txt" % (n - 1), "%08d.txt" % (n // 2)]
        ts = [threading.Thread(target=use, args=(j,)) for j in jobs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert json.loads(results[".shardfs/info.json"])["samples"] == n
        assert results[".shardfs/verify"] == b"status: ok\n"
        for i in (7, n - 1, n // 2):
            assert results["%08d.txt" % i] == tw.scale_payload(i)
        assert mount.last.stop() == 0
        err = mount.last.stderr()
        assert "LeakSanitizer" not in err and "AddressSanitizer" not in err, err[-4000:]


def expected_samples(src, rows):
    """samples.jsonl computed from the tars with tarfile: `rows` lists, in
    index row order, (tar, header offset) of every row whose key verifies.
    A row is a member when tarfile reads a file, hard link or symlink whose
    own header sits there; its sample key is its shown path up to the first
    '.' of the file name, and samples come in the order of their first row."""
    at = {}
    for tar in {t for t, _ in rows}:
        with tarfile.open(src / tar, encoding="utf-8", errors="surrogateescape") as t:
            for m in t.getmembers():
                if m.isreg() or m.islnk() or m.issym():
                    path = os.fsencode(shown_path(m.name))
                    if path == b".shardfs":
                        path = b".shardfs#1"
                    at[(tar, m.offset_data - 512)] = path
    samples = {}
    for key in rows:
        path = at.get(key)
        if not path:
            continue
        d, _, base = path.rpartition(b"/")
        stem, dot, ext = base.partition(b".")
        k = d + b"/" + stem if d else stem
        samples.setdefault(k, {}).setdefault(ext, path)
    txt = lambda b: b.decode("utf-8", "replace")  # noqa: E731
    return "".join(json.dumps({"i": i, "key": txt(k), "members": {txt(e): txt(p) for e, p in m.items()}},
                              ensure_ascii=False) + "\n"
                   for i, (k, m) in enumerate(samples.items())).encode()


def check_samples(view, want):
    path = view / ".shardfs" / "samples.jsonl"
    assert path.stat().st_size == len(want)
    assert read_through(path) == want
    assert read_through(path, chunk=97) == want
    # every member a line names is the file the view shows there
    for line in want.decode().splitlines():
        for p in json.loads(line)["members"].values():
            assert os.path.lexists(view / p), p


@pytest.mark.parametrize("case,fold", FOLDS)
def test_samples_of_fixtures(mount, case, fold):
    f = EXPECTED["cases"][case]["folds"][fold]
    rows = [(r["tar"], r["offset"]) for r in f["rows"]
            if r["header_stem_hashes_to_keyhash"] and r["tar"] == f["tars_in_fid_order"][r["fid"]]]
    want = expected_samples(TX / case, rows)
    assert want or case == "emptyshard"
    check_samples(mount(TX / case) / fold, want)


def odd_fold(src, variant):
    """A fold of awkward names: no extension, upper case, a trailing dot,
    names that need escaping, '..' and '.shardfs', nested directories,
    symlinks and hard links. "runs": every stem's rows contiguous (flag
    bit 0 set); "renamed": the same plus one member whose GNU long name has
    another stem than its name field; "scattered": directories with the
    same file names (stems repeat across samples), pax-renamed members, and
    each sample's members spread over the index."""
    import io
    names = []
    for s in range(40):
        names += [f"{s:06d}/{s:06d}.jpg", f"{s:06d}/{s:06d}.txt"]
    names += ["PHOTO.JPG", "PHOTO.Cls", "README", "README.", "x.jpg", "other/x.jpg", "100%.jpg",
              "100%.cls", "a\\b.txt", "tab\tname.jpg", "../up.jpg", ".shardfs", ".hidden",
              "q\"uote.jpg", "deep/a/b/c/d.tar.gz"]
    fmt = tarfile.GNU_FORMAT
    if variant == "renamed":
        names.append("l" * 120 + "/z.jpg")
    if variant == "scattered":
        names = [n.replace(f"/{n[:6]}.", "/image.") for n in names] + ["café.jpg", "café.cls"]
        names = names[::2] + names[1::2]
        fmt = tarfile.PAX_FORMAT
    with tarfile.open(src / "o_0000.tar", "w", format=fmt) as t:
        for i, name in enumerate(names):
            ti = tarfile.TarInfo(name)
            data = name.encode() * 3
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
            if name.startswith("000001/") and name.endswith(".txt"):
                # links of sample 000001, right after its last member
                base = name[:-4]
                ln = tarfile.TarInfo(base + ".lnk")
                ln.type, ln.linkname = tarfile.SYMTYPE, base.split("/")[1] + ".jpg"
                t.addfile(ln)
                hl = tarfile.TarInfo(base + ".hard")
                hl.type, hl.linkname = tarfile.LNKTYPE, base + ".jpg"
                t.addfile(hl)
    index_tars(src, "o")
    return [("o_0000.tar", off) for off in index_offsets(src / "o_0000.tar")]


def index_offsets(tar):
    data = tar.read_bytes()
    pos, out = 0, []
    while pos + 512 <= len(data) and data[pos:pos + 512] != bytes(512):
        out.append(pos)
        pos += 512 + -(-int(data[pos + 124:pos + 136].split(b"\0")[0].strip() or b"0", 8) // 512) * 512
    return out


@pytest.mark.parametrize("variant", ["runs", "renamed", "scattered"])
def test_samples_of_odd_names(mount, tmp_path, variant):
    src = tmp_path / "src"
    src.mkdir()
    rows = odd_fold(src, variant)
    want = expected_samples(src, rows)
    lines = [json.loads(x) for x in want.decode().splitlines()]
    by_key = {x["key"]: x["members"] for x in lines}
    stem = "image" if variant == "scattered" else "000001"
    assert by_key["000001/" + stem] == {"jpg": f"000001/{stem}.jpg", "txt": f"000001/{stem}.txt",
                                        "lnk": f"000001/{stem}.lnk", "hard": f"000001/{stem}.hard"}
    assert by_key["PHOTO"] == {"JPG": "PHOTO.JPG", "Cls": "PHOTO.Cls"}
    assert by_key["README"] == {"": "README"} and by_key["100%25"]["cls"] == "100%25.cls"
    assert "..#1/up" in by_key and by_key[""] == {"shardfs#1": ".shardfs#1", "hidden": ".hidden"}
    assert by_key["x"] == {"jpg": "x.jpg"} and by_key["other/x"] == {"jpg": "other/x.jpg"}
    mnt = mount(src)
    info = json.loads((mnt / "o" / ".shardfs" / "info.json").read_text())
    assert info["contiguous_flag"] == (variant != "scattered")
    check_samples(mnt / "o", want)
    # read at random offsets (no cursor to resume from), as a loader's seek does
    with open(mnt / "o" / ".shardfs" / "samples.jsonl", "rb") as f:
        for off in (len(want) - 1, 5, len(want) // 2, 0, len(want) // 3):
            f.seek(off)
            assert f.read(200) == want[off:off + 200]
