"""Mounts inside SRC and the mount's own options (issue 25, points 3 and 7).

A filesystem mounted inside SRC, another shardfs mount or this very one
bound there, is never entered by the daemon: looking it up answers EXDEV
with a line in .shardfs/errors, nothing through the mount waits on the
daemon itself, and SIGKILL ends the daemon. A mount point inside SRC is
refused at start with one line. Whatever -o says, the mount is nosuid and
nodev: a device node in SRC does not open through it. Every command through
a mount runs with a deadline, so a hang fails the test instead of stalling
it; these tests mount and bind as root."""
import errno
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import FIXTURES, SHARDFS, Mount, is_mounted, read_through, unmount
from relutil import run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="binds mounts: needs root")


def mount_options(mnt):
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == os.path.realpath(mnt):
                return set(fields[3].split(","))
    return set()


def make_src(src):
    """A SRC with a plain file, a container and an empty directory to mount on."""
    src.mkdir()
    (src / "plain.txt").write_bytes(b"plain\n")
    shutil.copy(FIXTURES / "tet" / "sample.tet", src / "sample.tet")
    (src / "inner").mkdir()
    return src


def stat_errno(path):
    """The errno of lstat(path) in a child with a deadline (0: it worked)."""
    r = run("python3", "-c",
            "import os,sys\ntry:\n os.lstat(sys.argv[1]); print(0)\n"
            "except OSError as e:\n print(e.errno)", path)
    return int(r.stdout)


def assert_mount_works(mnt):
    """The plain file and the container's view read as in SRC."""
    assert read_through(mnt / "plain.txt") == b"plain\n"
    r = run(str(SHARDFS.parent.parent / "tools" / "shardfs-cat"),
            FIXTURES / "tet" / "sample.tet", ".zgroup")
    assert r.returncode == 0
    assert read_through(mnt / "sample" / ".zgroup") == r.stdout


def test_mount_point_inside_src_is_refused_at_start(tmp_path):
    src = make_src(tmp_path / "src")
    alias = tmp_path / "alias"
    alias.mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    for root, mnt in ((src, src / "inner"), (empty, empty)):
        r = run(SHARDFS, root, mnt, "-f", timeout=30)
        assert r.returncode != 0
        lines = r.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "inside the source" in lines[0], lines
        assert not is_mounted(mnt)
    # SRC reached under another name (a bind mount): the same directory
    subprocess.run(["mount", "--bind", str(src), str(alias)], check=True)
    try:
        r = run(SHARDFS, src, alias / "inner", "-f", timeout=30)
        assert r.returncode != 0 and "inside the source" in r.stderr.decode()
        assert not is_mounted(alias / "inner")
    finally:
        subprocess.run(["umount", "-l", str(alias)], check=False)


def test_another_fuse_mount_inside_src_is_not_entered(tmp_path, mount):
    src = make_src(tmp_path / "src")
    other = tmp_path / "other"
    other.mkdir()
    (other / "under.txt").write_bytes(b"under\n")
    inner = Mount(other, src / "inner", [], tmp_path / "inner.log")
    try:
        assert (src / "inner" / "under.txt").read_bytes() == b"under\n"
        mnt = mount(src)
        names = set(run("ls", "-a", mnt).stdout.decode().split())
        assert {"plain.txt", "sample.tet", "sample", "inner"} <= names
        assert stat_errno(mnt / "inner") == errno.EXDEV
        assert stat_errno(mnt / "inner" / "under.txt") == errno.EXDEV
        assert_mount_works(mnt)
        # a walk of the whole mount ends, and skips the mount point
        r = run("find", mnt, timeout=60)
        assert "under.txt" not in r.stdout.decode()
        errors = (mnt / ".shardfs" / "errors").read_text()
        assert "inner: a mount point" in errors, errors
    finally:
        assert inner.stop() == 0


def test_own_mount_bound_inside_src_never_waits_and_sigkill_ends_it(tmp_path):
    """The daemon's own mount bound into SRC, walked by readers: no request
    waits on the daemon itself, and SIGKILL ends it with readers inside."""
    src = make_src(tmp_path / "src")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(src, mnt, [], tmp_path / "shardfs.log")
    bound = False
    try:
        subprocess.run(["mount", "--bind", str(mnt), str(src / "inner")], check=True)
        bound = True
        # SRC/inner is the mount itself; through the mount it is refused
        assert (src / "inner" / "plain.txt").read_bytes() == b"plain\n"
        for p in (mnt / "inner", mnt / "inner" / "plain.txt", src / "inner" / "inner"):
            assert stat_errno(p) == errno.EXDEV, p
        assert_mount_works(mnt)
        for _ in range(3):
            r = run("find", mnt, src, timeout=60)
            assert "sample/.zgroup" in r.stdout.decode()
        # readers busy inside while the daemon is killed
        stop = threading.Event()

        def reader(root):
            while not stop.is_set():
                subprocess.run(["find", str(root)], capture_output=True, timeout=120)

        threads = [threading.Thread(target=reader, args=(root,), daemon=True)
                   for root in (mnt, src / "inner", mnt / "sample")]
        for t in threads:
            t.start()
        time.sleep(0.5)
        m.proc.send_signal(signal.SIGKILL)
        try:
            m.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the daemon did not end within 30 s of SIGKILL")
        stop.set()
        # the dead mount answers at once: no reader is left waiting on it
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
    finally:
        if bound:
            subprocess.run(["umount", "-l", str(src / "inner")], check=False)
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait(timeout=60)
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, timeout=20)
    assert not is_mounted(mnt)


def test_nosuid_nodev_whatever_o_says(tmp_path, mount):
    src = make_src(tmp_path / "src")
    os.mknod(src / "zero", 0o666 | 0o020000, os.makedev(1, 5))  # as /dev/zero
    with open(src / "zero", "rb") as f:  # SRC itself allows devices
        assert f.read(4) == b"\0" * 4
    mnt = mount(src, "-o", "suid,dev,exec")
    opts = mount_options(mnt)
    assert {"ro", "nosuid", "nodev"} <= opts and not {"suid", "dev"} & opts, opts
    st = os.lstat(mnt / "zero")
    assert st.st_rdev == os.makedev(1, 5) and (st.st_mode & 0o170000) == 0o020000
    r = run("python3", "-c", "import sys\ntry:\n open(sys.argv[1],'rb').read(4); print(0)\n"
            "except OSError as e:\n print(e.errno)", mnt / "zero")
    assert int(r.stdout) == errno.EACCES
    assert_mount_works(mnt)


@pytest.fixture(autouse=True)
def _no_mount_left(tmp_path):
    yield
    for p in (tmp_path / "src" / "inner", tmp_path / "mnt"):
        unmount(p)
