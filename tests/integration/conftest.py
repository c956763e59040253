"""Shared pieces of the mounted tests: where things are, and a `mount`
fixture that runs the real daemon on a directory and always unmounts."""
import json
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHARDFS_BUILD", REPO / "build"))
SHARDFS = BUILD / "fs" / "shardfs"
TOOLS = BUILD / "tools"
FIXTURES = Path(os.environ.get("SHARDFS_FIXTURES", REPO / "tests" / "fixtures"))
WRITERS = REPO / "tests" / "writers"

# The kernel's switch for FUSE over io_uring (Linux 6.14+), and the
# transport every mount of this run asks for: scripts/test.sh runs the
# mounted tests a second time with SHARDFS_IO_URING=on, the switch on.
URING_SWITCH = Path("/sys/module/fuse/parameters/enable_uring")
IO_URING = os.environ.get("SHARDFS_IO_URING")

SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def is_mounted(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def unmount(mnt, timeout=20):
    """Unmounts, falling back to a lazy unmount so nothing is left behind."""
    if not is_mounted(mnt):
        return
    try:
        subprocess.run(["fusermount3", "-u", str(mnt)], timeout=timeout,
                       capture_output=True)
    except subprocess.TimeoutExpired:
        pass
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-uz", str(mnt)], timeout=timeout,
                       capture_output=True)


class Mount:
    """One running daemon in the foreground, its stderr kept for checks."""

    def __init__(self, src, mnt, args, log):
        self.src, self.mnt, self.log = Path(src), Path(mnt), Path(log)
        if IO_URING and not any(a.startswith("--io-uring") for a in args):
            args = [*args, "--io-uring", IO_URING]
        self.proc = subprocess.Popen(
            [str(SHARDFS), str(src), str(mnt), "-f", *args],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
        deadline = time.monotonic() + 30
        while not is_mounted(mnt):
            if self.proc.poll() is not None:
                raise RuntimeError(f"shardfs exited {self.proc.returncode}: {self.stderr()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("shardfs did not mount within 30 s")
            time.sleep(0.02)

    def stderr(self):
        return self.log.read_text(errors="replace")

    def stop(self):
        """Unmounts and waits for the daemon; returns its exit code."""
        unmount(self.mnt)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    def errors(self):
        return (self.mnt / ".shardfs" / "errors").read_text()


@pytest.fixture
def mount(tmp_path_factory):
    """mount(src, *args) -> Path of the mount point. Every mount is taken
    down at teardown, and the daemon must have exited cleanly with no
    sanitizer report."""
    mounts = []

    def start(src, *args):
        base = tmp_path_factory.mktemp("mnt")
        mnt = base / "mnt"
        mnt.mkdir()
        m = Mount(src, mnt, list(args), base / "shardfs.log")
        mounts.append(m)
        start.last = m
        return mnt

    yield start
    problems = []
    for m in mounts:
        rc = m.stop()
        err = m.stderr()
        if rc != 0:
            problems.append(f"shardfs exited {rc}: {err[-4000:]}")
        elif any(mark in err for mark in SANITIZER_MARKS):
            problems.append(f"sanitizer report: {err[-8000:]}")
    assert not problems, "\n".join(problems)


@contextmanager
def uring_switch(on):
    """Sets the kernel's io_uring switch for FUSE (root only) and puts the
    old value back."""
    old = URING_SWITCH.read_text().strip()
    URING_SWITCH.write_text("Y" if on else "N")
    try:
        yield
    finally:
        URING_SWITCH.write_text(old)


def mount_stats(mnt):
    """MNT/.shardfs/stats.json, read unbuffered: no isatty(), so reading it
    sends no IOCTL of its own, and in one read() call: exactly one READ (a
    read to the end could send a second one, when a counter gained a digit
    between the two and the kernel refreshed the file's size)."""
    with open(Path(mnt) / ".shardfs" / "stats.json", "rb", buffering=0) as f:
        return json.loads(f.read(1 << 20))


def read_through(path, chunk=None):
    """Reads a file through the kernel, optionally in fixed-size pieces."""
    with open(path, "rb") as f:
        if chunk is None:
            return f.read()
        parts = []
        while True:
            b = f.read(chunk)
            if not b:
                return b"".join(parts)
            parts.append(b)


def shown_path(name):
    """A tar path as the view shows it: empty and '.' components dropped,
    bytes escaped (docs/design.md §3.3), '..' made '..#1'."""
    comps = []
    for c in name.encode("utf-8", "surrogateescape").split(b"/"):
        if c in (b"", b"."):
            continue
        esc = b"".join(b"%%%02X" % x if x in b"%\\" or x < 0x20 or x == 0x7F else bytes([x])
                       for x in c)
        comps.append(b"..#1" if esc == b".." else esc)
    return os.fsdecode(b"/".join(comps))
