"""A view beside every tar (issue 27, docs/tree-layout.md "An unindexed tar"):
each `<name>.tar` no fold claims shows as `<name>/`, its members at their
paths by a fold's rules, from an index the daemon builds in memory from the
tar's headers when the view is first used. The tars are written at test
time by GNU tar, bsdtar and Python's tarfile (the writers and formats of
test_tar_writers.py), with no index, and every member read through the
mount must equal what tarfile extracts."""
import errno
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time

import pytest

from conftest import TOOLS, mount_stats, read_through
import test_tar_writers as tw


@pytest.fixture(scope="module")
def tars(tmp_path_factory):
    """One source directory holding a tar per writer and format, no index."""
    root = tmp_path_factory.mktemp("trees")
    tw.write_tree(root)
    src = tmp_path_factory.mktemp("src")
    for name, (write, trees) in tw.WRITERS.items():
        write(src / f"{name}.tar", root, trees)
    for name, make in tw.MADE.items():
        make(src / f"{name}.tar")
    yield src
    shutil.rmtree(root)


def walks(mnt):
    return mount_stats(mnt)["tar_indexing"]


@pytest.mark.parametrize("name", list(tw.WRITERS) + list(tw.MADE))
def test_members_as_tarfile_reads_them(mount, tars, name):
    mnt = mount(tars)
    want = tw.check_fold(mnt / name, tars / f"{name}.tar")
    assert (mnt / name / ".shardfs" / "verify").read_text() == "status: ok\n"
    info = json.loads((mnt / name / ".shardfs" / "info.json").read_text())
    assert info["format"] == "tar" and info["index"] == "in memory"
    assert [s["name"] for s in info["shards"]] == [f"{name}.tar"]
    # samples.jsonl names every file, hard link and symlink once
    lines = [json.loads(x) for x in (mnt / name / ".shardfs" / "samples.jsonl").read_text().splitlines()]
    assert [x["i"] for x in lines] == list(range(len(lines)))
    listed = sorted(p for x in lines for p in x["members"].values())
    # JSON shows bytes that are not UTF-8 as U+FFFD
    members = sorted(p.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                     for p, (k, _) in want.items() if k != "dir")
    assert listed == members
    trees = tw.WRITERS.get(name, (None, []))[1]
    if "holes" in trees:
        assert want["holes/many.bin"][0] == "file" and want["holes/big.bin"][1][0] == tw.BIG
    if "short" in trees:
        assert os.listdir(mnt / name / "short" / "emptydir" / "inner") == []
        assert os.readlink(mnt / name / "short" / "sym") == "a.txt"
    assert walks(mnt)["tars_indexed"] >= 1


def small_tar(path, members):
    """A tar of {name: bytes} written by tarfile."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for name, body in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(body)
            t.addfile(ti, io.BytesIO(body))


def test_listing_reads_no_more_than_the_check(mount, tmp_path):
    """ls and ls -l of a directory of tars walk none of them (a view is
    indexed when entered), a flat name is then found by the index built at
    the first lookup, and a file that is no tar gets no view."""
    for i in range(20):
        small_tar(tmp_path / f"t{i:02d}.tar", {f"{k:03d}.txt": f"{i}:{k}\n".encode() for k in range(30)})
    (tmp_path / "bogus.tar").write_bytes(b"not a tar at all" * 100)
    mnt = mount(tmp_path)
    names = sorted(os.listdir(mnt))
    assert names == sorted([f"t{i:02d}.tar" for i in range(20)] + [f"t{i:02d}" for i in range(20)] +
                           ["bogus.tar"])
    for i in range(20):
        os.stat(mnt / f"t{i:02d}")
    s = mount_stats(mnt)
    assert s["tar_indexing"]["tars_indexed"] == 0 and s["tar_indexing"]["headers_walked"] == 0
    assert s["containers_opened"] == 0
    assert (mnt / "t07" / "012.txt").read_bytes() == b"7:12\n"
    assert walks(mnt)["tars_indexed"] == 1 and walks(mnt)["headers_walked"] == 30
    assert not (mnt / "t07" / "999.txt").exists()
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "bogus.tar" in errors and "no tar header" in errors


def test_a_folds_shards_get_no_second_view(mount, tmp_path):
    """Tars a fold takes as shards (`F_<S>.tar`, or WebDataset's
    `F-<S>.tar` when F has no `_` shard) show only in the fold's view;
    tars beside them that no fold takes get their own."""
    for s in ("0000", "0001"):
        small_tar(tmp_path / f"f_{s}.tar", {f"{s}.txt": s.encode()})
        small_tar(tmp_path / f"wds-{s}.tar", {f"w{s}.txt": s.encode()})
    small_tar(tmp_path / "g_x_0.tar", {"g.txt": b"g"})  # fold "g_x" has no index
    small_tar(tmp_path / "mix-0.tar", {"m.txt": b"m"})  # fold "mix" takes its "_" shard
    small_tar(tmp_path / "mix_0.tar", {"n.txt": b"n"})
    for fold in ("f", "wds", "mix"):
        r = subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(tmp_path), fold],
                           capture_output=True)
        assert r.returncode == 0, r.stderr
    mnt = mount(tmp_path)
    views = sorted(n for n in os.listdir(mnt) if (mnt / n).is_dir())
    assert views == ["f", "g_x_0", "mix", "mix-0", "wds"]
    assert (mnt / "f" / "0001.txt").read_bytes() == b"0001"
    assert (mnt / "wds" / "w0000.txt").read_bytes() == b"0000"
    assert (mnt / "mix-0" / "m.txt").read_bytes() == b"m"
    assert (mnt / "mix" / "n.txt").read_bytes() == b"n"
    # looked up by name before any listing: the same answer
    mnt2 = mount(tmp_path)
    assert not (mnt2 / "f_0000").exists() and not (mnt2 / "wds-0001").exists()
    assert (mnt2 / "g_x_0" / "g.txt").read_bytes() == b"g"
    # an index removed: its shards get views of their own
    (tmp_path / "f.taridx").unlink()
    deadline = time.monotonic() + 10
    while not (mnt / "f_0001").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (mnt / "f_0001" / "0001.txt").read_bytes() == b"0001"


def test_tar_replaced_while_mounted(mount, tmp_path):
    """A tar replaced by rename answers as a replaced fold does: a handle
    opened before reads the version it opened, the view shows the new
    version's members within a few seconds, a member gone is gone."""
    small_tar(tmp_path / "d.tar", {"a.txt": b"old a\n", "gone.txt": b"gone\n"})
    mnt = mount(tmp_path)
    assert (mnt / "d" / "a.txt").read_bytes() == b"old a\n"
    fd = os.open(mnt / "d" / "a.txt", os.O_RDONLY)
    try:
        small_tar(tmp_path / ".d.tmp", {"a.txt": b"new version of a\n", "b.txt": b"b\n"})
        os.rename(tmp_path / ".d.tmp", tmp_path / "d.tar")
        assert os.pread(fd, 100, 0) == b"old a\n"
        deadline = time.monotonic() + 10
        got = None
        while time.monotonic() < deadline:
            try:
                got = (mnt / "d" / "a.txt").read_bytes()
            except OSError as e:
                assert e.errno == errno.ENOENT, e  # the view between versions
            if got == b"new version of a\n":
                break
            time.sleep(0.05)
        assert got == b"new version of a\n"
        assert (mnt / "d" / "b.txt").read_bytes() == b"b\n"
        assert not (mnt / "d" / "gone.txt").exists()
        assert os.pread(fd, 100, 0) == b"old a\n"
    finally:
        os.close(fd)
    assert sorted(os.listdir(mnt / "d")) == ["a.txt", "b.txt"]


def test_tar_that_cannot_be_indexed(mount, tmp_path):
    """A tar whose second header is damaged passes the listing's check but
    cannot be indexed: its view's verify says why, lookups fail with EIO
    (never a partial view), and the reason is logged."""
    small_tar(tmp_path / "bad.tar", {"a.txt": b"a" * 600, "b.txt": b"b"})
    raw = bytearray((tmp_path / "bad.tar").read_bytes())
    raw[1536 + 10] ^= 0x55  # inside the second header's name: its checksum fails
    (tmp_path / "bad.tar").write_bytes(raw)
    mnt = mount(tmp_path)
    assert "bad" in os.listdir(mnt)
    with pytest.raises(OSError) as ex:
        os.listdir(mnt / "bad")
    assert ex.value.errno == errno.EIO
    rep = (mnt / "bad" / ".shardfs" / "verify").read_text()
    assert rep.startswith("status: failed\n") and "offset 1536" in rep and "checksum" in rep, rep
    assert "bad.tar" in (mnt / ".shardfs" / "errors").read_text()


def many_member_tar(path, n):
    """n one-byte members, written header by header (tarfile's TarInfo,
    much faster than addfile for large n)."""
    pad = bytes(511)
    with open(path, "wb") as f:
        for i in range(n):
            ti = tarfile.TarInfo(f"{i:07d}.txt")
            ti.size = 1
            f.write(ti.tobuf(tarfile.GNU_FORMAT) + b"x" + pad)
        f.write(bytes(1024))


def test_progress_and_other_views_not_held(mount, tmp_path):
    """While a large tar is walked, stats.json shows it, and reads in
    another tar's view and listings of the mount answer without waiting
    for the walk."""
    many_member_tar(tmp_path / "big.tar", 400_000)
    small_tar(tmp_path / "small.tar", {"s.txt": b"small\n"})
    os.mkdir(tmp_path / "dir")
    mnt = mount(tmp_path)
    assert (mnt / "small" / "s.txt").read_bytes() == b"small\n"
    result = {}
    t = threading.Thread(target=lambda: result.update(n=len(os.listdir(mnt / "big"))))
    t.start()
    try:
        deadline = time.monotonic() + 60
        seen = None
        while time.monotonic() < deadline and t.is_alive():
            w = walks(mnt)
            if w["tars_now"] == 1 and w["headers_walked"] > 0:
                seen = w
                break
            time.sleep(0.005)
        assert seen, "the walk never showed in stats.json"
        assert seen["bytes_of_tars_now"] == (tmp_path / "big.tar").stat().st_size
        # other views and SRC answer while the walk goes on
        read_through(mnt / "small" / "s.txt")
        os.listdir(mnt / "dir")
        os.listdir(mnt)
        assert walks(mnt)["tars_now"] == 1, "a read waited for the walk to end"
    finally:
        t.join(120)
    assert result["n"] == 400_000
    w = walks(mnt)
    assert w["tars_now"] == 0 and w["headers_walked"] >= 400_001


def test_index_beyond_the_budget(mount, tmp_path):
    """The index built for an unindexed tar is held in the --cache-size budget as its
    walk grows: one larger than the whole budget is refused, saying so, its
    walk stopped where the budget ended, and the tar is not walked again at
    each lookup; a small tar beside it is served."""
    many_member_tar(tmp_path / "big.tar", 4000)  # 4000 rows of 32 bytes > 64 KiB
    small_tar(tmp_path / "small.tar", {"s.txt": b"small\n"})
    mnt = mount(tmp_path, "--cache-size", "64K")
    walked = []
    for _ in range(3):
        with pytest.raises(OSError) as ex:
            os.stat(mnt / "big" / "0000001.txt")
        assert ex.value.errno == errno.EIO
        walked.append(walks(mnt)["headers_walked"])
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "big.tar: its index needs" in errors and "--cache-size" in errors, errors
    assert 0 < walked[0] < 4000 and walked == walked[:1] * 3, walked
    assert (mnt / "small" / "s.txt").read_bytes() == b"small\n"


def test_tools_read_a_tar_alone(tmp_path):
    """shardfs-cat, shardfs-verify and shardfs-inspect take a tar with no
    index as the mount shows it."""
    small_tar(tmp_path / "x.tar", {"d/a.txt": b"alpha\n", "b.bin": bytes(range(256))})
    tool = lambda *a: subprocess.run([str(TOOLS / a[0]), *map(str, a[1:])], capture_output=True)  # noqa: E731
    r = tool("shardfs-cat", tmp_path / "x.tar", "d/a.txt")
    assert r.returncode == 0 and r.stdout == b"alpha\n", r.stderr
    assert tool("shardfs-cat", tmp_path / "x.tar", "b.bin").stdout == bytes(range(256))
    r = tool("shardfs-verify", tmp_path / "x.tar")
    assert r.returncode == 0 and r.stdout.endswith(b"status: ok\n"), r
    r = tool("shardfs-inspect", "--json", tmp_path / "x.tar")
    assert r.returncode == 0 and json.loads(r.stdout)["format"] == "tar"


def link_with_size(fmt, data, last):
    """A tar whose hard link l.txt (to a.txt) says it has a.txt's size, as
    some old writers (and CPython's and libarchive's test archives) have
    it: with data after it (`data`) or none; c.txt after it unless it is
    `last`, the tar then ending right after its header when no data
    follows (no end blocks)."""
    a = b"A" * 700
    pad = lambda b: b + b"\0" * (-len(b) % 512)  # noqa: E731
    ti = tarfile.TarInfo("a.txt")
    ti.size = len(a)
    out = ti.tobuf(fmt) + pad(a)
    ln = tarfile.TarInfo("l.txt")
    ln.type, ln.linkname, ln.size = tarfile.LNKTYPE, "a.txt", len(a)
    if fmt == tarfile.PAX_FORMAT:
        ln.pax_headers = {"comment": "a pax archive"}
    out += ln.tobuf(fmt)
    if data:
        out += pad(b"L" * len(a))
    if not last:
        c = tarfile.TarInfo("c.txt")
        c.size = 3
        out += c.tobuf(fmt) + pad(b"CCC")
    return out + (b"\0" * 1024 if data or not last else b"")


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_hard_link_with_a_size(mount, tmp_path, fmt):
    """Issue 39: a hard link whose header has a non-zero size is read, the
    data after it skipped when the block after its header is no header
    (where GNU tar skips ahead to the next header, and bsdtar reads it in a
    pax archive), else none; the link shows the file it names, as GNU tar
    and tarfile extract it. Each read as an unindexed tar and as a fold."""
    src = tmp_path / "src"
    src.mkdir()
    variants = {"data": (True, False), "nodata": (False, False), "end": (False, True)}
    for name, (data, last) in variants.items():
        (src / f"{name}.tar").write_bytes(link_with_size(fmt, data, last))
        shutil.copy(src / f"{name}.tar", src / f"f{name}_0.tar")
        p = subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src), f"f{name}"],
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
    mnt = mount(src)
    for name, (data, last) in variants.items():
        out = tmp_path / f"x{name}"
        out.mkdir()
        # GNU tar exits 2 where data follows (it skipped ahead), having
        # extracted every member
        subprocess.run(["tar", "-xf", str(src / f"{name}.tar"), "-C", str(out)],
                       capture_output=True, timeout=60)
        want = {n: (out / n).read_bytes() for n in os.listdir(out)}
        assert want["l.txt"] == b"A" * 700 and ("c.txt" in want) == (not last)
        if not data:
            with tarfile.open(src / f"{name}.tar") as t:
                assert {m.name: t.extractfile(m).read() for m in t.getmembers()} == want
        for view in (name, f"f{name}"):
            assert sorted(os.listdir(mnt / view)) == sorted(want), view
            for n, b in want.items():
                assert read_through(mnt / view / n) == b, (view, n)
