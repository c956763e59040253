"""Where views appear (docs/design.md §3.1) and how they behave whatever the format:
names and clashes, broken containers, symlinks, hidden .shardfs/, the
error log, and containers replaced while mounted."""
import json
import os
import re
import shutil
import stat
import time

from conftest import FIXTURES, mount_stats, read_through

TET = FIXTURES / "tet" / "sample.tet"
TSUMUGI = FIXTURES / "tsumugi" / "gold_prod.tsumugi"
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (\S.*?): (.+)$")


def error_lines(mnt):
    text = (mnt / ".shardfs" / "errors").read_text()
    lines = text.splitlines()
    for line in lines:
        assert LINE.match(line), line
    return lines


def test_view_names_and_clashes(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(TET, src / "plain.tet")
    shutil.copy(TET, src / "taken.tet")
    (src / "taken").mkdir()
    shutil.copy(TET, src / "both.tet")
    (src / "both").mkdir()
    (src / "both.tet.d").write_text("in the way")
    # two containers whose views want the same name: the earlier file wins
    shutil.copy(TET, src / "y.tet")
    shutil.copy(TSUMUGI, src / "y.tsumugi")
    mnt = mount(src)
    names = sorted(os.listdir(mnt))
    assert names == sorted([
        "plain.tet", "plain",
        "taken.tet", "taken", "taken.tet.d",
        "both.tet", "both", "both.tet.d",
        "y.tet", "y", "y.tsumugi", "y.tsumugi.d",
    ])
    assert (mnt / "plain").is_dir() and (mnt / "plain" / ".zgroup").is_file()
    assert (mnt / "taken").is_dir() and os.listdir(mnt / "taken") == []
    assert (mnt / "taken.tet.d" / ".zgroup").is_file()
    assert (mnt / "both.tet.d").read_text() == "in the way"
    assert (mnt / "y" / ".zgroup").is_file()
    assert (mnt / "y.tsumugi.d" / "regions").is_dir()
    lines = error_lines(mnt)
    clash = [l for l in lines if LINE.match(l).group(1) == "both.tet"]
    assert len(clash) == 1 and "taken" in clash[0]


def test_missing_names_are_answered_without_opening_containers(tmp_path, mount):
    """A lookup of a name no container could be placed under answers ENOENT
    without listing the directory; names a container could take still see
    the placement of a full listing, looked up before any listing."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        shutil.copy(TET, src / f"c{i}.tet")
    shutil.copy(TET, src / "taken.tet")
    (src / "taken").mkdir()
    shutil.copy(TET, src / "y.tet")
    shutil.copy(TSUMUGI, src / "y.tsumugi")
    (src / "link.tet").symlink_to("c0.tet")

    def opened(mnt):
        return mount_stats(mnt)["containers_opened"]

    mnt = mount(src)
    for name in ("missing", "missing.tet", "c0.npy", "nothing.tet.d", "link", "c3.d", ".d"):
        assert not os.path.lexists(mnt / name), name
    assert opened(mnt) == 0
    # names several files could take, or a .d name, need the whole placement
    # (a fresh mount for each, no listing first); placing checks each
    # container's header, and only the view entered is opened
    want = {"taken.tet.d": ".zgroup", "y": ".zgroup", "y.tsumugi.d": "regions"}
    for name, inside in want.items():
        mnt = mount(src)
        assert (mnt / name / inside).exists(), name
        assert opened(mnt) == 1
    mnt = mount(src)
    assert not os.path.lexists(mnt / "taken.tsumugi.d")
    assert os.listdir(mnt / "taken") == []
    # a name one file alone could take opens that file only, and its view
    # keeps its inode once the directory is listed in full
    mnt = mount(src)
    ino = os.stat(mnt / "c3").st_ino
    assert (mnt / "c3" / ".zgroup").is_file() and (mnt / "c7" / ".zgroup").is_file()
    assert opened(mnt) == 2
    assert "c3" in os.listdir(mnt)
    assert opened(mnt) == 2
    assert os.stat(mnt / "c3").st_ino == ino
    assert read_through(mnt / "c3" / ".zgroup") == read_through(mnt / "c0" / ".zgroup")
    assert mount_stats(mnt)["errors"] == 0


def test_views_placed_one_by_one_give_way_to_a_full_listing(tmp_path, mount):
    """Up to 64 views are placed by lookups alone; the next lookup lists the
    directory once (reusing them: same inodes) instead of copying a growing
    partial listing on every lookup."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(80):
        shutil.copy(TET, src / f"c{i:02}.tet")
    mnt = mount(src)
    inos = {}
    for i in range(64):
        inos[i] = os.stat(mnt / f"c{i:02}").st_ino
        # a stat opens nothing (test_view_roots.py); entering opens one
        assert (mnt / f"c{i:02}" / ".zgroup").is_file()
        assert mount_stats(mnt)["containers_opened"] == i + 1
    # the full listing checks the headers of the other 16 and opens only
    # the view entered
    assert (mnt / "c64" / ".zgroup").is_file()
    assert mount_stats(mnt)["containers_opened"] == 65
    assert all(os.stat(mnt / f"c{i:02}").st_ino == ino for i, ino in inos.items())
    assert len(os.listdir(mnt)) == 160


def test_broken_and_symlinked_containers(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(TET, src / "good.tet")
    (src / "garbage.tet").write_bytes(b"this is not a tet file at all" * 10)
    data = TET.read_bytes()
    (src / "torn.tet").write_bytes(data[: len(data) // 2])
    os.symlink("good.tet", src / "alias.tet")
    mnt = mount(src)
    names = sorted(os.listdir(mnt))
    assert names == sorted(["good.tet", "good", "garbage.tet", "torn.tet", "alias.tet"])
    # broken files still pass through byte for byte
    assert read_through(mnt / "garbage.tet") == (src / "garbage.tet").read_bytes()
    assert read_through(mnt / "torn.tet") == data[: len(data) // 2]
    assert os.readlink(mnt / "alias.tet") == "good.tet"
    assert not (mnt / "garbage").exists() and not (mnt / "alias").exists()
    # each failure logged once, however often the directory is listed
    for _ in range(3):
        os.listdir(mnt)
        (mnt / "garbage").exists()
    lines = error_lines(mnt)
    paths = [LINE.match(l).group(1) for l in lines]
    assert sorted(paths) == ["garbage.tet", "torn.tet"]


def test_container_that_fails_when_entered(tmp_path, mount):
    """A file that passes the listing's header check but fails its full open
    (here: the chunk index it points at is damaged) shows a view holding
    only .shardfs/, whose verify says why; the failure is logged once."""
    src = tmp_path / "src"
    src.mkdir()
    data = bytearray(TET.read_bytes())
    index_off = int.from_bytes(data[16:24], "little")
    assert 32 <= index_off < len(data)
    data[index_off:index_off + 4] = b"XXXX"  # the chunk index's magic
    (src / "late.tet").write_bytes(bytes(data))
    shutil.copy(TET, src / "good.tet")
    mnt = mount(src)
    assert sorted(os.listdir(mnt)) == ["good", "good.tet", "late", "late.tet"]
    assert mount_stats(mnt)["containers_opened"] == 0
    assert error_lines(mnt) == []
    assert os.listdir(mnt / "late") == []
    verify = (mnt / "late" / ".shardfs" / "verify").read_text()
    assert verify.startswith("status: failed\n") and "chunk index" in verify, verify
    assert "chunk index" in (mnt / "late" / ".shardfs" / "info.txt").read_text()
    for _ in range(3):
        os.listdir(mnt)
        os.listdir(mnt / "late")
    lines = error_lines(mnt)
    assert [LINE.match(l).group(1) for l in lines] == ["late.tet"], lines
    assert "chunk index" in lines[0]
    assert (mnt / "good" / ".zgroup").is_file()


def test_meta_is_hidden_but_reachable(tmp_path, mount):
    src = tmp_path / "src"
    (src / "deep" / "er").mkdir(parents=True)
    shutil.copy(TET, src / "deep" / "er" / "t.tet")
    mnt = mount(src)
    view = mnt / "deep" / "er" / "t"
    assert ".shardfs" not in os.listdir(view)
    assert ".shardfs" not in os.listdir(mnt)
    info = (view / ".shardfs" / "info.txt").read_text()
    assert info and info.endswith("\n")
    assert (view / ".shardfs" / "verify").read_text().splitlines()[0] == "status: ok"
    st = os.stat(view / ".shardfs" / "info.txt")
    assert st.st_size == len(info.encode())
    assert oct(st.st_mode & 0o777) == "0o444"
    assert oct(os.stat(view).st_mode & 0o777) == "0o555"
    # view times come from the container
    assert int(os.stat(view).st_mtime) == int(os.stat(src / "deep" / "er" / "t.tet").st_mtime)


def test_replaced_container(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURES / "tet" / "multichunk_u8.tet", src / "t.tet")
    mnt = mount(src)
    before = sorted(os.listdir(mnt / "t"))
    f = open(mnt / "t" / ".shardfs" / "info.txt", "rb")
    head = f.read(5)
    old_info = (mnt / "t" / ".shardfs" / "info.txt").read_bytes()
    shutil.copy(TET, src / ".t.tmp")
    os.rename(src / ".t.tmp", src / "t.tet")
    time.sleep(1.3)
    after = sorted(os.listdir(mnt / "t"))
    assert before != after
    new_info = (mnt / "t" / ".shardfs" / "info.txt").read_bytes()
    assert new_info != old_info
    # the handle opened before the replacement keeps reading the old view
    assert head + f.read() == old_info
    f.close()


def test_error_lines_stay_one_line_per_problem(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    (src / "two\nlines%.tet").write_bytes(b"not a tet file" * 20)
    (src / "plain.tet").write_bytes(b"not a tet file either" * 20)
    mnt = mount(src)
    os.listdir(mnt)
    lines = error_lines(mnt)
    assert len(lines) == 2
    paths = sorted(LINE.match(l).group(1) for l in lines)
    # control bytes and % in a path are written as %XX, as view names are
    assert paths == ["plain.tet", "two%0Alines%25.tet"]


def listing_with_attrs(top):
    """Every entry under `top` as os.scandir and DirEntry.stat show it
    (READDIRPLUS where the kernel uses it), beside os.lstat of its path."""
    seen = {}
    stack = [top]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                seen[e.path] = (st.st_mode, st.st_size, st.st_ino)
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
    return seen


def test_listing_with_attributes(tmp_path, mount):
    """READDIRPLUS: attributes given with a listing are exactly what a
    lookup gives, in SRC and in views (files of known size, text renderings
    of unknown size, directories, links), and the lookup references it takes
    balance the kernel's forgets (unmount is clean, no forget underflow)."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for i in range(300):
        (src / "sub" / f"f{i:03d}.bin").write_bytes(bytes([i % 251]) * (i * 37 % 5000))
    (src / "link").symlink_to("sub/f001.bin")
    shutil.copy(TET, src / "t.tet")
    for f in (FIXTURES / "taridx" / "small").iterdir():
        shutil.copy(f, src / f.name)
    tatami = sorted((FIXTURES / "tatami").glob("*.tatami"))
    for f in tatami[:2]:
        shutil.copy(f, src / f.name)
    # a directory changed within the last second is listed anew (and its
    # taridx views reopened, with new inodes) until it settles
    time.sleep(2.2)
    mnt = mount(src)

    def lookups():
        return json.loads((mnt / ".shardfs" / "stats.json").read_text())["requests"]["lookup"]

    # the attributes come with the listing, for SRC files and for view files
    # of known size (taridx members): far fewer lookups than entries. Files
    # whose size needs a build (tatami columns) are looked up as before.
    for d in ("sub", "train"):
        before = lookups()
        n = len(listing_with_attrs(mnt / d))
        assert n >= 100 and lookups() - before < n / 4, (d, n, lookups() - before)
    first = listing_with_attrs(mnt)
    for _ in range(2):
        again = listing_with_attrs(mnt)
        assert again == first
    views = 0
    for path, (mode, size, ino) in first.items():
        lst = os.lstat(path)
        assert (lst.st_mode, lst.st_size, lst.st_ino) == (mode, size, ino), path
        rel = os.path.relpath(path, mnt)
        origin = src / rel
        if os.path.lexists(origin):
            o = os.lstat(origin)
            assert (mode & 0o170000) == (o.st_mode & 0o170000), rel
            if not stat.S_ISDIR(mode):  # directories show size 0
                assert size == o.st_size, rel
            if stat.S_ISREG(mode):
                assert read_through(path) == origin.read_bytes(), rel
        elif stat.S_ISREG(mode):
            views += 1
            assert len(read_through(path)) == size, rel
    assert views > 20
    # the kernel forgets everything it holds, then lists and looks up anew
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")
    except OSError:
        pass
    assert listing_with_attrs(mnt).keys() == first.keys()
    for path, (mode, size, _) in first.items():
        st = os.lstat(path)
        assert (st.st_mode, st.st_size) == (mode, size), path
    log = mount.last
    assert "forget" not in log.stderr(), log.stderr()
