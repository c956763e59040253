"""Stopping the daemon: SIGTERM or SIGINT with reads in flight, and
`fusermount3 -u` (refused while busy) or `-uz` with files open. The daemon
exits 0 with no sanitizer report, no reader hangs, nothing stays mounted,
and SRC is byte-identical afterwards. (A daemon killed with -9 leaving a
stale mount is in test_mount.py.)"""
import errno
import os
import random
import signal
import subprocess
import threading
import time
from contextlib import contextmanager

import pytest

from conftest import SANITIZER_MARKS, SHARDFS, Mount, is_mounted, unmount
from relutil import copy_samples, fingerprint

# what a read may see once the daemon is gone; over io_uring the kernel ends
# a request handed to an entry whose thread has exited with ECANCELED
GONE = {errno.ENOTCONN, errno.ECONNABORTED, errno.ENOENT, errno.EIO, errno.ECANCELED}


def make_src(path, cache):
    src = copy_samples(path / "src", cache)
    (src / "big.bin").write_bytes(random.Random(4).randbytes(32 << 20))
    return src


@contextmanager
def inherited(ignored):
    """With `ignored`, what is started here inherits SIGINT and SIGTERM
    ignored, as a shell's background job (`cmd &` in a script) starts with
    SIGINT ignored; otherwise their default (whatever this process has:
    pytest itself may have been started as such a job)."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = [signal.getsignal(s) for s in sigs]
    for s in sigs:
        signal.signal(s, signal.SIG_IGN if ignored else signal.SIG_DFL)
    try:
        yield
    finally:
        for s, h in zip(sigs, old):
            signal.signal(s, h)


@contextmanager
def daemon(tmp_path, tmp_path_factory, ignored=False):
    """A foreground daemon on a fresh SRC (started with SIGINT and SIGTERM
    ignored, or at their default); afterwards it is stopped and SRC must be
    byte-identical to what it was before."""
    src = make_src(tmp_path, tmp_path_factory.getbasetemp())
    before = fingerprint(src)
    (tmp_path / "mnt").mkdir()
    with inherited(ignored):
        m = Mount(src, tmp_path / "mnt", [], tmp_path / "log")
    try:
        yield m, src
    finally:
        m.stop()
    assert fingerprint(src) == before


def readers(mnt, stop, n=8):
    """Threads reading in loops until stopped or the mount goes; each
    records the errno that ended it, or None."""
    paths = [mnt / "big.bin", mnt / "tsumugi" / "sample" / "docs.jsonl",
             mnt / "tet" / "weather.tet"]
    ends = []

    def loop(seed):
        rnd = random.Random(seed)
        try:
            while not stop.is_set():
                with open(rnd.choice(paths), "rb") as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    while f.read(1 << 20) and not stop.is_set():
                        pass
            ends.append(None)
        except OSError as e:
            ends.append(e.errno)

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads, ends


def assert_clean_exit(m, rc):
    err = m.stderr()
    assert rc == 0, err
    assert not any(mark in err for mark in SANITIZER_MARKS), err
    assert not is_mounted(m.mnt)


@pytest.mark.parametrize("ignored", [False, True], ids=["default", "inherited_ignored"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_with_reads_in_flight(tmp_path, tmp_path_factory, sig, ignored):
    """The signal unmounts whatever disposition the daemon inherited
    (issue 39: libfuse installs its handlers only over the default)."""
    stop = threading.Event()
    with daemon(tmp_path, tmp_path_factory, ignored) as (m, src):
        try:
            threads, ends = readers(m.mnt, stop)
            time.sleep(1.5)
            m.proc.send_signal(sig)
            rc = m.proc.wait(timeout=30)
            for t in threads:
                t.join(20)
                assert not t.is_alive(), "a reader hung after the daemon stopped"
            assert_clean_exit(m, rc)
            assert set(ends) <= GONE | {None}, ends
        finally:
            stop.set()


def test_fusermount_u_with_open_files(tmp_path, tmp_path_factory):
    with daemon(tmp_path, tmp_path_factory) as (m, src):
        want = (src / "big.bin").read_bytes()
        f = open(m.mnt / "big.bin", "rb")
        head = f.read(1000)
        # busy: refused, and the mount keeps serving the open file
        r = subprocess.run(["fusermount3", "-u", str(m.mnt)], capture_output=True, timeout=30)
        assert r.returncode != 0 and b"busy" in r.stderr, r
        assert is_mounted(m.mnt)
        rest = f.read()
        f.close()
        assert head + rest == want
        # idle: unmounts, and the daemon exits by itself
        r = subprocess.run(["fusermount3", "-u", str(m.mnt)], capture_output=True, timeout=30)
        assert r.returncode == 0, r
        assert_clean_exit(m, m.proc.wait(timeout=30))


def test_lazy_unmount_with_open_files(tmp_path, tmp_path_factory):
    with daemon(tmp_path, tmp_path_factory) as (m, src):
        want = (src / "big.bin").read_bytes()
        f = open(m.mnt / "big.bin", "rb")
        head = f.read(1 << 20)
        r = subprocess.run(["fusermount3", "-uz", str(m.mnt)], capture_output=True, timeout=30)
        assert r.returncode == 0, r
        assert not is_mounted(m.mnt)
        # the open file reads on to the end, bytes intact
        rest = f.read()
        assert head + rest == want
        assert m.proc.poll() is None, "the daemon left while a file was still open"
        f.close()
        assert_clean_exit(m, m.proc.wait(timeout=30))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("form", ["mnt", "./mnt", "sub/../mnt", "mnt/"])
def test_signal_unmounts_a_relative_mount_point(tmp_path, sig, form):
    """The reproducer: `shardfs src mnt -f` run from MNT's parent, then
    SIGTERM, left a stale mount ("failed to unmount mnt: Invalid argument")
    and exited 0. MNT in any relative form is unmounted."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a\n")
    mnt.mkdir()
    (tmp_path / "sub").mkdir()
    log = tmp_path / "log"
    proc = subprocess.Popen([str(SHARDFS), "src", form, "-f"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        assert (mnt / "a.txt").read_bytes() == b"a\n"
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
        err = log.read_text(errors="replace")
        assert rc == 0 and "failed to unmount" not in err, err
        assert not any(mark in err for mark in SANITIZER_MARKS), err
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
