"""Who can read the mount (docs/security.md): without `-o allow_other` only
the user who mounted it; with it every user reads what SRC's owners and
modes let them read (a sample SRC of 0644 files and 0755 directories shows
files 0444 and directories 0555), and still nothing can be written. The
other user is `nobody`, or a user the test creates, through setpriv."""
import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import SANITIZER_MARKS, Mount
from relutil import copy_samples, fingerprint


def as_nobody(*cmd):
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           *map(str, cmd)], capture_output=True, timeout=60)


@pytest.fixture
def world(tmp_path_factory):
    """A directory `nobody` can traverse (pytest's own tmp is 0700), with SRC
    (every writer's sample) and an empty mount point in it."""
    base = Path(tempfile.mkdtemp(prefix="shardfs-perm-", dir="/tmp"))
    os.chmod(base, 0o755)
    copy_samples(base / "src", tmp_path_factory.getbasetemp())
    (base / "src" / "plain.txt").write_bytes(b"plain bytes\n")
    (base / "mnt").mkdir()
    yield base
    shutil.rmtree(base, ignore_errors=True)


def run_mount(base, *args):
    m = Mount(base / "src", base / "mnt", list(args), base / "shardfs.log")
    return m


def stop_clean(m):
    rc = m.stop()
    err = m.stderr()
    assert rc == 0, err
    assert not any(mark in err for mark in SANITIZER_MARKS), err


def test_other_users_cannot_read_without_allow_other(world):
    before = fingerprint(world / "src")
    m = run_mount(world)
    try:
        mnt = world / "mnt"
        assert (mnt / "plain.txt").read_bytes() == b"plain bytes\n"
        for target in (mnt / "plain.txt", mnt / "tsumugi" / "sample" / "regions"):
            r = as_nobody("cat", target)
            assert r.returncode != 0 and b"Permission denied" in r.stderr, r
        r = as_nobody("ls", mnt)
        assert r.returncode != 0 and b"Permission denied" in r.stderr
    finally:
        stop_clean(m)
    assert fingerprint(world / "src") == before


def test_allow_other_lets_everyone_read_only(world):
    before = fingerprint(world / "src")
    m = run_mount(world, "-o", "allow_other")
    try:
        mnt = world / "mnt"
        r = as_nobody("cat", mnt / "plain.txt")
        assert r.returncode == 0 and r.stdout == b"plain bytes\n", r
        # every file and view file: 0444, every directory 0555, readable by nobody
        files = 0
        for dirpath, dirnames, filenames in os.walk(mnt):
            for n in dirnames:
                st = os.lstat(Path(dirpath) / n)
                if stat.S_ISLNK(st.st_mode):  # alias links: mode 0777 like every symlink
                    continue
                assert stat.S_IMODE(st.st_mode) == 0o555, (dirpath, n)
            for n in filenames:
                p = Path(dirpath) / n
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    continue
                assert stat.S_IMODE(st.st_mode) == 0o444, p
                files += 1
        assert files > 20
        view_file = next(p for p in (mnt / "tet").rglob("*.npy"))
        r = as_nobody("cat", view_file)
        assert r.returncode == 0 and r.stdout == view_file.read_bytes()
        # nothing can be written or changed, by nobody either
        for cmd in (["touch", mnt / "new"], ["sh", "-c", f"echo x >> '{mnt}/plain.txt'"],
                    ["rm", "-f", mnt / "plain.txt"], ["mkdir", mnt / "d"],
                    ["chmod", "777", mnt / "plain.txt"]):
            r = as_nobody(*cmd)
            assert r.returncode != 0, cmd
    finally:
        stop_clean(m)
    assert fingerprint(world / "src") == before


@pytest.fixture
def user():
    """A user created for the test (with a group of its own), removed after."""
    name = f"sfperm{os.getpid() % 100000}"
    subprocess.run(["userdel", name], capture_output=True)
    subprocess.run(["groupdel", name], capture_output=True)
    r = subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell",
                        "/usr/sbin/nologin", name], capture_output=True, timeout=60)
    assert r.returncode == 0, r
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)
        subprocess.run(["groupdel", name], capture_output=True, timeout=60)


def as_user(name, *cmd):
    return subprocess.run(["setpriv", f"--reuid={name}", f"--regid={name}", "--init-groups",
                           *map(str, cmd)], capture_output=True, timeout=60)


def test_permissions_follow_src(world, user, tmp_path_factory):
    """With allow_other (default_permissions always on), another user reads
    through the mount exactly what they can read in SRC: SRC entries show
    their own owner, group and mode less the write bits; a view and all in
    it show its container's, narrowed by its other files (a fold's shards,
    a Shardlake index's manifest), directories with x where they have r."""
    src = world / "src"
    uid, gid = pwd.getpwnam(user).pw_uid, grp.getgrnam(user).gr_gid
    # plain files and directories of every kind of access
    files = {"pub.txt": (0o644, 0, 0), "priv.txt": (0o600, 0, 0), "grp.txt": (0o640, 0, gid),
             "grp_no.txt": (0o640, 0, 0), "mine.txt": (0o600, uid, gid),
             "exe.sh": (0o4755, 0, 0)}
    for n, (mode, u, g) in files.items():
        (src / n).write_bytes(n.encode() + b"\n")
        os.chown(src / n, u, g)
        os.chmod(src / n, mode)
    for d, mode in (("closed", 0o700), ("open", 0o755), ("listonly", 0o744)):
        (src / d).mkdir(mode=mode)
        os.chmod(src / d, mode)
        (src / d / "inner.txt").write_bytes(b"inner\n")
    # containers: copies of the tet sample with each access; folds with
    # one shard closed; a Shardlake index with its manifest closed
    tet = next((src / "tet").glob("*.tet"))
    for n, (mode, u, g) in {"pub": (0o644, 0, 0), "priv": (0o600, 0, 0),
                            "grp": (0o640, 0, gid), "mine": (0o400, uid, gid)}.items():
        shutil.copy(tet, src / f"{n}.tet")
        os.chown(src / f"{n}.tet", u, g)
        os.chmod(src / f"{n}.tet", mode)
    fold = src / "taridx"
    shutil.copytree(fold, src / "closedfold")
    shard = sorted((src / "closedfold").glob("*_0001.tar"))[0]
    os.chmod(shard, 0o600)
    shutil.copytree(src / "shardlake", src / "closedlake")
    for m in (src / "closedlake").rglob("manifest.json"):
        os.chmod(m, 0o600)

    m = run_mount(world, "-o", "allow_other")
    mnt = world / "mnt"
    try:
        def readable_in(root, rel):
            return as_user(user, "cat", root / rel).returncode == 0

        # SRC entries: their own owner and group, mode less write and set-id
        checked = 0
        for dirpath, dirnames, filenames in os.walk(src):
            for n in dirnames + filenames:
                p = Path(dirpath) / n
                rel = p.relative_to(src)
                s, t = os.lstat(p), os.lstat(mnt / rel)
                assert (t.st_uid, t.st_gid) == (s.st_uid, s.st_gid), rel
                want = 0o777 if stat.S_ISLNK(s.st_mode) else stat.S_IMODE(s.st_mode) & 0o555
                assert stat.S_IMODE(t.st_mode) == want, rel
                if n in filenames and not stat.S_ISLNK(s.st_mode):
                    assert readable_in(mnt, rel) == readable_in(src, rel), rel
                    checked += 1
        assert checked > 20
        for n in files:
            assert readable_in(mnt, n) == (n in ("pub.txt", "grp.txt", "mine.txt", "exe.sh")), n
        assert not readable_in(mnt, "closed/inner.txt") and readable_in(mnt, "open/inner.txt")
        assert as_user(user, "ls", mnt / "listonly").returncode == 0
        assert not readable_in(mnt, "listonly/inner.txt")

        # views: readable exactly when every file they read is
        def view_readable(view):
            ls = as_user(user, "ls", view).returncode == 0
            files = [p for p in view.rglob("*") if p.is_file() and not p.is_symlink()]
            assert files, view
            reads = {readable_in(view, p.relative_to(view)) for p in files[:5]}
            assert reads == {ls}, view
            return ls

        for n, yes in (("pub", True), ("priv", False), ("grp", True), ("mine", True)):
            v = mnt / n
            s = os.stat(src / f"{n}.tet")
            t = os.stat(v)
            assert (t.st_uid, t.st_gid) == (s.st_uid, s.st_gid)
            r = stat.S_IMODE(s.st_mode) & 0o444
            assert stat.S_IMODE(t.st_mode) == r | r >> 2, n
            assert view_readable(v) == yes == readable_in(src, f"{n}.tet"), n
        assert view_readable(mnt / "taridx" / "demo")
        assert not view_readable(mnt / "closedfold" / "demo")
        assert stat.S_IMODE(os.stat(mnt / "closedfold" / "demo").st_mode) == 0o500
        lake = [p for p in (mnt / "shardlake").rglob("shard-*") if p.is_dir()]
        closed = [p for p in (mnt / "closedlake").rglob("shard-*") if p.is_dir()]
        assert lake and closed
        assert all(view_readable(p) for p in lake[:2])
        assert not any(view_readable(p) for p in closed[:2])
        # the error log names files anywhere in SRC: only the mounting user
        e = os.stat(mnt / ".shardfs" / "errors")
        assert (e.st_uid, stat.S_IMODE(e.st_mode)) == (os.geteuid(), 0o400)
        assert not readable_in(mnt, ".shardfs/errors")
        assert readable_in(mnt, ".shardfs/stats.json")
    finally:
        stop_clean(m)


def wait_for(cond, what, timeout=5.0):
    """Polls cond() until it holds; SRC changes reach the kernel through
    inotify, a few milliseconds after the change."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_owner_group_and_mode_changes_are_seen_at_the_next_access(world, user):
    """chgrp, chown and chmod in SRC while its directory is unchanged
    (issue 25): the next access follows them, for a plain file and for a
    container's view; a handle opened before keeps what its open allowed."""
    src, mnt = world / "src", world / "mnt"
    gid = grp.getgrnam(user).gr_gid
    tet = next((src / "tet").glob("*.tet"))
    (src / "g.txt").write_bytes(b"group bytes\n")
    shutil.copy(tet, src / "g.tet")
    for n in ("g.txt", "g.tet"):
        os.chown(src / n, 0, gid)
        os.chmod(src / n, 0o640)
    m = run_mount(world, "-o", "allow_other")
    holder = None
    try:
        part = sorted(p.name for p in (mnt / "g").iterdir() if p.is_file())[0]
        assert as_user(user, "cat", mnt / "g.txt").stdout == b"group bytes\n"
        assert as_user(user, "cat", mnt / "g" / part).returncode == 0
        # a reader holding the file open across the revocation
        holder = subprocess.Popen(
            ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "/usr/bin/python3", "-c",
             "import sys\nf = open(sys.argv[1], 'rb')\nprint('open', flush=True)\n"
             "sys.stdin.readline()\nsys.stdout.write(f.read().decode())", str(mnt / "g.txt")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "open\n"
        mtime = os.stat(src).st_mtime_ns
        for n in ("g.txt", "g.tet"):
            os.chown(src / n, 0, 0)
        assert os.stat(src).st_mtime_ns == mtime  # the directory is unchanged
        wait_for(lambda: as_user(user, "cat", mnt / "g.txt").returncode != 0, "chgrp of a file")
        wait_for(lambda: as_user(user, "ls", mnt / "g").returncode != 0, "chgrp of a container")
        assert as_user(user, "cat", mnt / "g" / part).returncode != 0
        assert os.stat(mnt / "g").st_gid == 0 and os.stat(mnt / "g.txt").st_gid == 0
        out, _ = holder.communicate("\n", timeout=30)
        assert holder.returncode == 0 and out == "group bytes\n"
        # chmod opens them to others; chown to the user gives them back
        for n in ("g.txt", "g.tet"):
            os.chmod(src / n, 0o644)
        wait_for(lambda: as_user(user, "cat", mnt / "g.txt").returncode == 0, "chmod of a file")
        wait_for(lambda: as_user(user, "cat", mnt / "g" / part).returncode == 0,
                 "chmod of a container")
        for n in ("g.txt", "g.tet"):
            os.chmod(src / n, 0o600)
        wait_for(lambda: as_user(user, "cat", mnt / "g" / part).returncode != 0,
                 "chmod 600 of a container")
        for n in ("g.txt", "g.tet"):
            os.chown(src / n, pwd.getpwnam(user).pw_uid, 0)
        wait_for(lambda: as_user(user, "cat", mnt / "g.txt").returncode == 0, "chown of a file")
        wait_for(lambda: as_user(user, "cat", mnt / "g" / part).returncode == 0,
                 "chown of a container")
        assert os.stat(mnt / "g").st_uid == pwd.getpwnam(user).pw_uid
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        stop_clean(m)


def test_a_shard_closed_narrows_its_fold_at_the_next_access(world, user):
    """A chmod of a fold's shard alone (its directory and index unchanged)
    closes the fold's view to the user at the next lookup of the view,
    within the second the kernel keeps the view's entry."""
    src, mnt = world / "src", world / "mnt"
    m = run_mount(world, "-o", "allow_other")
    try:
        view = mnt / "taridx" / "demo"
        member = next(p for p in view.rglob("*") if p.is_file())
        assert as_user(user, "cat", member).returncode == 0
        shard = sorted((src / "taridx").glob("*_0001.tar"))[0]
        mtime = os.stat(src / "taridx").st_mtime_ns
        os.chmod(shard, 0o600)
        assert os.stat(src / "taridx").st_mtime_ns == mtime
        wait_for(lambda: as_user(user, "ls", view).returncode != 0, "chmod of a shard")
        assert stat.S_IMODE(os.stat(view).st_mode) == 0o500
        os.chmod(shard, 0o644)
        wait_for(lambda: as_user(user, "cat", member).returncode == 0, "chmod back")
    finally:
        stop_clean(m)


def test_alias_link_shows_its_file_and_refuses_readlink(world, user):
    """A Shardlake alias view (a symlink) shows its alias file's owner and
    read bits, and its target only to who may read the alias file."""
    src, mnt = world / "src", world / "mnt"
    aliases = src / "shardlake" / "aliases"
    (aliases / "latest.json").chmod(0o600)
    (aliases / "pq.json").chmod(0o644)
    m = run_mount(world, "-o", "allow_other")
    try:
        closed, opened = mnt / "shardlake" / "aliases" / "latest", mnt / "shardlake" / "aliases" / "pq"
        assert os.path.islink(closed) and os.path.islink(opened)
        for link, mode in ((closed, 0o400), (opened, 0o444)):
            st = os.lstat(link)
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, mode), link
        target = os.readlink(closed)  # root reads it (the kernel keeps no copy)
        assert target
        r = as_user(user, "readlink", closed)
        assert r.returncode != 0 and r.stdout == b"", r
        r = as_user(user, "ls", closed / ".")
        assert r.returncode != 0, r  # nor followed
        r = as_user(user, "readlink", opened)
        assert r.returncode == 0 and r.stdout.strip() == os.readlink(opened).encode()
    finally:
        stop_clean(m)


def test_a_view_beside_a_closed_file_says_nothing_of_its_bytes(world, user):
    """Beside a container that some user may not read, a view shows whatever
    its bytes (docs/security.md); one that fails its check holds only
    .shardfs/. Beside one everybody may read, a view shows only when its
    bytes pass the check, as before."""
    src, mnt = world / "src", world / "mnt"
    tet = next((src / "tet").glob("*.tet"))
    shutil.copy(tet, src / "good.tet")
    (src / "bad.tet").write_bytes(b"not a tet at all\n" * 64)
    (src / "pubbad.tet").write_bytes(b"not a tet at all\n" * 64)
    for n, mode in (("good.tet", 0o600), ("bad.tet", 0o600), ("pubbad.tet", 0o644)):
        os.chmod(src / n, mode)
    m = run_mount(world, "-o", "allow_other")
    try:
        names = set(as_user(user, "ls", mnt).stdout.decode().split())
        assert {"good", "bad"} <= names and "pubbad" not in names, names
        for n in ("good", "bad"):
            st = os.stat(mnt / n)
            assert stat.S_IMODE(st.st_mode) == 0o500, n  # as its container: for root
            assert as_user(user, "ls", mnt / n).returncode != 0, n
        assert os.listdir(mnt / "bad") == []  # .shardfs/ is hidden, as in every view
        verify = (mnt / "bad" / ".shardfs" / "verify").read_text()
        assert "bad.tet" in verify, verify
        assert len(os.listdir(mnt / "good")) > 1
    finally:
        stop_clean(m)
