"""shardfs over a real distributed filesystem: a GlusterFS volume (one brick
in a temporary directory, mounted with the glusterfs FUSE client over
loopback) holding containers of all five formats. Every file reads exactly
as from a local copy; with the brick killed under open handles, reads of
bytes the node does not hold fail within seconds, nothing hangs and the
daemon keeps running; once the brick is started again the same daemon
serves every file exactly, through the old handles and new opens alike.
docs/distributed.md says how to run it and what the volume's options do."""
import ctypes
import errno
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, WRITERS
from relutil import TimedReader, copy_samples, read_fd, read_tree, within

sys.path.insert(0, str(WRITERS))
import taridx_writer as xw  # noqa: E402
import tet_writer as tw  # noqa: E402

# Volume options (docs/distributed.md): a server that stops answering is
# declared down after 2 s instead of 42, and the client's caches are off so
# that every read the test makes reaches the brick.
VOLUME_OPTIONS = {
    "network.ping-timeout": "2",
    "performance.quick-read": "off",
    "performance.io-cache": "off",
    "performance.read-ahead": "off",
    "performance.stat-prefetch": "off",
    "performance.open-behind": "off",
    "performance.readdir-ahead": "off",
    "performance.nl-cache": "off",
}
READ_LIMIT = 10  # seconds any one read may take while the brick is down


def gluster(*args, timeout=60, check=True):
    r = subprocess.run(["gluster", "--mode=script", *args], capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"gluster {' '.join(args)}: {r.stdout}{r.stderr}".strip())
    return r


def glusterd_answers():
    try:
        return gluster("volume", "list", timeout=20, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def skip(reason):
    print(f"SKIPPED: {reason}")
    pytest.skip(reason)


def subreaper(on):
    """PR_SET_CHILD_SUBREAPER (36) for this process."""
    if ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def start_glusterd(pidfile):
    """Starts glusterd; skips (with the reason printed) if it cannot start."""
    if not shutil.which("glusterd"):
        skip("glusterd is not installed (scripts/setup.sh installs glusterfs-server)")
    r = subprocess.run(["glusterd", "-p", str(pidfile)], capture_output=True, text=True,
                       timeout=60)
    deadline = time.monotonic() + 30
    while not glusterd_answers():
        if r.returncode != 0 or time.monotonic() > deadline:
            skip(f"glusterd cannot start here (exit {r.returncode}): {r.stderr.strip()}")
        time.sleep(0.5)


def stop_glusterd(pidfile):
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            # a daemon reparented to a PID 1 that does not reap stays a zombie
            try:
                if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                    try:
                        os.waitpid(pid, 0)  # ours when we are its subreaper
                    except ChildProcessError:
                        pass
                    return
            except OSError:
                return
            time.sleep(0.1)


def brick_pid(volume):
    xml = gluster("volume", "status", volume, "--xml").stdout
    pids = [int(n.findtext("pid")) for n in ET.fromstring(xml).iter("node")
            if n.findtext("path", "").startswith("/")]
    assert len(pids) == 1 and pids[0] > 0, xml
    return pids[0]


def is_mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == str(path) for line in f)


class Volume:
    """A one-brick volume on this host, FUSE-mounted at `mnt`."""

    def __init__(self, base):
        self.name = f"shardfs-test-{os.getpid()}"
        self.brick = base / "brick"
        self.mnt = base / "mnt"
        self.brick.mkdir()
        self.mnt.mkdir()
        # glusterd refuses 127.0.0.1 and "localhost" by name; the host
        # name resolves to this host (over loopback where /etc/hosts says so)
        self.host = socket.gethostname()

    def create(self):
        gluster("volume", "create", self.name, f"{self.host}:{self.brick}", "force")
        for k, v in VOLUME_OPTIONS.items():
            gluster("volume", "set", self.name, k, v)
        gluster("volume", "start", self.name)
        subprocess.run(["mount", "-t", "glusterfs", f"{self.host}:/{self.name}", str(self.mnt)],
                       check=True, capture_output=True, timeout=60)

    def signal_brick(self, sig):
        pid = brick_pid(self.name)
        os.kill(pid, sig)
        if sig == signal.SIGKILL:
            # glusterd takes a brick whose pid still exists for running and
            # would not start it again: reap it (we are its subreaper)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def start_brick(self, probe):
        """Starts the brick again and waits until `probe` (a file in the
        glusterfs mount) can be read again; returns the seconds it took."""
        gluster("volume", "start", self.name, "force")
        return self.wait_back(probe)

    def wait_back(self, probe):
        start = time.monotonic()
        while True:
            try:
                probe.read_bytes()
                return time.monotonic() - start
            except OSError:
                assert time.monotonic() - start < 60, "the volume did not come back in 60 s"
                time.sleep(0.2)

    def remove(self):
        """Unmounts, stops and deletes the volume, whatever state it is in."""
        for cmd in (["umount", str(self.mnt)], ["umount", "-l", str(self.mnt)]):
            if not is_mounted(self.mnt):
                break
            try:
                subprocess.run(cmd, capture_output=True, timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for args in (("stop", self.name, "force"), ("delete", self.name)):
            try:
                gluster("volume", *args, check=False)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture
def volume(tmp_path_factory):
    base = tmp_path_factory.mktemp("gluster")
    pidfile = base / "glusterd.pid"
    started = False
    # daemons started from here (glusterd, its bricks, the client) become
    # our children instead of PID 1's, which may never reap them
    subreaper(True)
    if not glusterd_answers():
        start_glusterd(pidfile)
        started = True
    v = Volume(base)
    try:
        v.create()
        yield v
    finally:
        # shardfs mounts over v.mnt are taken down first (the mount
        # fixture is set up after this one); a brick left stopped would
        # hold up the volume's stop
        try:
            v.signal_brick(signal.SIGCONT)
        except (RuntimeError, AssertionError, OSError, ValueError, ET.ParseError,
                subprocess.TimeoutExpired):
            pass
        v.remove()
        if started:
            stop_glusterd(pidfile)
        subreaper(False)


def write_tree(root, cache):
    """warm/: writer samples and fixtures of all five formats; cold/: a
    plain file and containers big enough that their payloads are never
    touched by listing them (they are read only after the outage)."""
    copy_samples(root / "warm" / "samples", cache)
    for fmt in ("tsumugi", "tatami", "tet", "taridx", "shardlake"):
        shutil.copytree(FIXTURES / fmt, root / "warm" / "fixtures" / fmt)
    cold = root / "cold"
    cold.mkdir()
    rng = np.random.default_rng(7)
    (cold / "big.bin").write_bytes(rng.bytes(16 << 20))
    a = rng.integers(0, 256, (2048, 2048), dtype=np.uint8)
    tw.write_tet(str(cold / "w.tet"), [tw.Dataset(b"x", a, (1024, 1024), codec="zstd")])
    xw.write_fold(cold, "fold", [(f"{i:06d}", {"bin": rng.bytes(2 << 20)}) for i in range(4)])
    (root / "late.bin").write_bytes(b"looked up only after the outage\n")


# Handles into cold/ and where their reads go: (path, offset, length). Far
# from anything a listing reads: a plain file (the kernel copies from the
# daemon's mapping), a tar member (the same), a zstd tile and the .npy
# assembled from tiles (the daemon decodes mapped bytes itself).
COLD_READS = [("big.bin", 12 << 20, 1 << 20), ("fold/000003.bin", 1 << 20, 1 << 20),
              ("w/x/1.1", 0, 1 << 20), ("w/x.npy", 3 << 20, 1 << 20)]


def timed(fn, limit=READ_LIMIT):
    """(fn's result or the errno it raised, seconds); a call that takes
    longer than `limit` is a hang and fails the test."""
    start = time.monotonic()
    v = within(limit, "a call", fn)
    return v, time.monotonic() - start


def alive(daemon, result, what):
    """Fails naming the daemon's exit when a read met ENOTCONN because it
    died (the reader may learn of it before the exit can be collected)."""
    if result == errno.ENOTCONN:
        try:
            daemon.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    assert daemon.poll() is None, f"shardfs died with {daemon.returncode} reading {what}"


def relative(tree, root):
    return {str(p.relative_to(root)): v for p, v in tree.items()}


def test_glusterfs_source(tmp_path, tmp_path_factory, volume, mount):
    local = tmp_path / "local"
    write_tree(local, tmp_path_factory.getbasetemp())
    # copied with their times, so both sides' views are alike to the byte
    shutil.copytree(local, volume.mnt, dirs_exist_ok=True)
    ref = mount(local)
    mnt = mount(volume.mnt)
    daemon = mount.last.proc
    reader = TimedReader(limit=60)

    # every file reads as from the local copy (the failures too: some
    # fixtures are damaged on purpose)
    want = relative(read_tree(ref, reader), ref)
    got = relative(read_tree(mnt / "warm", reader), mnt)
    assert got == {k: v for k, v in want.items() if k.startswith("warm/")}
    assert sum(isinstance(v, bytes) for v in got.values()) > 300

    # handles on every warm file and on cold/ (opened, not read): some
    # thousands of descriptors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 1 << 16)), hard))
    warm = {k: os.open(mnt / k, os.O_RDONLY) for k, v in got.items() if isinstance(v, bytes)}
    cold = {k: os.open(mnt / "cold" / k, os.O_RDONLY) for k, _, _ in COLD_READS}
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")

        # a brick that stops answering (stopped, not dead): a read of bytes
        # the node does not hold fails once the client declares the server
        # gone (network.ping-timeout), and meanwhile the daemon serves
        # other requests
        volume.signal_brick(signal.SIGSTOP)
        try:
            box = {}
            t = threading.Thread(target=lambda: box.update(v=timed(
                lambda: read_fd(cold["big.bin"], 4 << 20, 1 << 20), limit=30)))
            t.start()
            time.sleep(0.5)
            v, secs = timed(lambda: (mnt / ".shardfs" / "stats.json").read_bytes(), limit=2)
            assert isinstance(v, bytes), v
            t.join(40)
            v, secs = box["v"]
            assert v == errno.EIO, v if isinstance(v, int) else len(v)
            assert secs < READ_LIMIT, secs
            print(f"brick stopped: a read of cold bytes failed after {secs:.1f} s")
        finally:
            volume.signal_brick(signal.SIGCONT)
        volume.wait_back(volume.mnt / "late.bin")
        assert daemon.poll() is None, f"shardfs died with {daemon.returncode}"

        volume.signal_brick(signal.SIGKILL)
        time.sleep(0.5)

        # bytes this node does not hold fail within seconds, with EIO
        slowest = 0.0
        for k, off, length in COLD_READS:
            v, secs = timed(lambda: read_fd(cold[k], off, length))
            slowest = max(slowest, secs)
            alive(daemon, v, k)
            assert v == errno.EIO, (k, v if isinstance(v, int) else f"{len(v)} bytes")
        # the rest reads exactly from what the node still holds (the
        # kernel's and the daemon's caches, pages the daemon has mapped)
        # or fails the same way; never ENOTCONN, never a hang
        failed = 0
        for k, fd in warm.items():
            v, secs = timed(lambda: read_fd(fd))
            slowest = max(slowest, secs)
            alive(daemon, v, k)
            assert v == errno.EIO or v == want[k], (k, v if isinstance(v, int) else len(v))
            failed += v == errno.EIO
        # a name never looked up fails too, with EIO rather than ENOTCONN
        v, secs = timed(lambda: os.stat(mnt / "late.bin"))
        assert v == errno.EIO, v
        print(f"brick down: cold reads failed, {failed} of {len(warm)} warm reads failed, "
              f"slowest call {max(slowest, secs):.2f} s")
        assert daemon.poll() is None, f"shardfs died with {daemon.returncode} during the outage"
        assert (mnt / ".shardfs" / "stats.json").read_bytes()

        took = volume.start_brick(volume.mnt / "late.bin")
        print(f"brick back: the volume read again after {took:.1f} s")

        # the same daemon, no remount: the old handles read exactly ...
        for k, fd in cold.items():
            assert read_fd(fd) == want[f"cold/{k}"], k
        for k, fd in warm.items():
            assert read_fd(fd) == want[k], k
    finally:
        for fd in list(warm.values()) + list(cold.values()):
            os.close(fd)
    # ... and so does every file opened anew, late.bin included
    assert relative(read_tree(mnt, reader), mnt) == want
    assert daemon.poll() is None
