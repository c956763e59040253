"""Who can read the mount (docs/security.md): without `-o allow_other` only
the user who mounted it; with it everyone, files 0444 and directories 0555,
and still nothing can be written. The other user is `nobody`, through
setpriv."""
import os
import shutil
import stat
import subprocess
import tempfile
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
