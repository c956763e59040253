"""The mount itself: SRC shows through byte for byte, read-only, with the
root's .shardfs/ and a live view of a changing source."""
import errno
import hashlib
import json
import os
import random
import resource
import signal
import stat
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest

from conftest import SHARDFS, is_mounted, mount_stats, read_through, unmount

SIZES = [0, 1, 511, 4095, 4096, 4097, 65535, 131073, (1 << 20) + 3, 7_654_321]


def make_tree(root: Path, seed=1):
    """Files of many sizes, a deep tree, odd names and symlinks."""
    rnd = random.Random(seed)
    files = {}
    for i, size in enumerate(SIZES):
        p = root / f"f{i}.bin"
        p.write_bytes(rnd.randbytes(size))
        files[p.relative_to(root)] = p
    deep = root.joinpath(*[f"d{i}" for i in range(12)])
    deep.mkdir(parents=True)
    (deep / "leaf.txt").write_bytes(b"deep leaf\n")
    odd = root / "names"
    odd.mkdir()
    for name in ["with space.txt", "ünïcödé-名前.dat", "semi;colon,comma", "-dash", "#hash%pct"]:
        (odd / name).write_bytes(name.encode() * 3)
    (odd / "empty dir").mkdir()
    os.symlink("f1.bin", root / "rel-link")
    os.symlink("/nonexistent/target", root / "dangling")
    os.symlink("names/with space.txt", root / "link to space")
    return files


def walk(root: Path):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            out[p.relative_to(root)] = p
    return out


def test_tree_shows_through(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    make_tree(src)
    mnt = mount(src)
    want, got = walk(src), walk(mnt)
    assert sorted(map(str, got)) == sorted(map(str, want))
    for rel, p in want.items():
        q = mnt / rel
        st, qt = os.lstat(p), os.lstat(q)
        assert stat.S_IFMT(st.st_mode) == stat.S_IFMT(qt.st_mode), rel
        if stat.S_ISLNK(st.st_mode):
            assert os.readlink(q) == os.readlink(p)
        elif stat.S_ISDIR(st.st_mode):
            assert stat.S_IMODE(qt.st_mode) == 0o555
        else:
            assert stat.S_IMODE(qt.st_mode) == 0o444
            assert qt.st_size == st.st_size
            assert int(qt.st_mtime) == int(st.st_mtime)
            assert read_through(q) == p.read_bytes(), rel


def test_big_file_and_odd_reads(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    data = random.Random(7).randbytes(100 * 1000 * 1000)
    (src / "big.bin").write_bytes(data)
    mnt = mount(src)
    h = hashlib.sha256()
    with open(mnt / "big.bin", "rb") as f:
        while b := f.read(1 << 20):
            h.update(b)
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    rnd = random.Random(3)
    fd = os.open(mnt / "big.bin", os.O_RDONLY)
    try:
        for _ in range(300):
            off = rnd.randrange(0, len(data) + 10)
            size = rnd.choice([1, 3, 4095, 4097, 65537, rnd.randrange(1, 300000)])
            assert os.pread(fd, size, off) == data[off:off + size]
        assert os.pread(fd, 100, len(data)) == b""
        assert os.pread(fd, 100, len(data) - 7) == data[-7:]
    finally:
        os.close(fd)


def test_concurrent_readers(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    files = make_tree(src, seed=11)
    mnt = mount(src)
    failures = []

    def reader(seed):
        rnd = random.Random(seed)
        for _ in range(40):
            rel = rnd.choice(list(files))
            want = files[rel].read_bytes()
            off = rnd.randrange(0, len(want) + 1)
            with open(mnt / rel, "rb") as f:
                f.seek(off)
                got = f.read(rnd.randrange(1, 200000))
            if got != want[off:off + len(got)] or (len(got) == 0 and off < len(want)):
                failures.append((rel, off))

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_read_only(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"abc")
    (src / "d").mkdir()
    mnt = mount(src)
    attempts = [
        lambda: open(mnt / "a", "wb"),
        lambda: open(mnt / "a", "ab"),
        lambda: open(mnt / "new", "wb"),
        lambda: os.truncate(mnt / "a", 0),
        lambda: os.chmod(mnt / "a", 0o777),
        lambda: os.utime(mnt / "a", (0, 0)),
        lambda: os.mkdir(mnt / "x"),
        lambda: os.rmdir(mnt / "d"),
        lambda: os.unlink(mnt / "a"),
        lambda: os.rename(mnt / "a", mnt / "b"),
        lambda: os.symlink("a", mnt / "s"),
        lambda: os.link(mnt / "a", mnt / "h"),
        lambda: os.setxattr(mnt / "a", "user.x", b"1"),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as e:
            attempt()
        assert e.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTSUP), attempt
    assert (src / "a").read_bytes() == b"abc"
    assert sorted(os.listdir(src)) == ["a", "d"]
    sv = os.statvfs(mnt)
    assert sv.f_flag & os.ST_RDONLY


def test_meta_dir(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    (src / "x").write_bytes(b"12345")
    mnt = mount(src)
    assert ".shardfs" not in os.listdir(mnt)
    assert (mnt / ".shardfs").is_dir()
    fd = os.open(mnt / "x", os.O_RDONLY)
    assert os.read(fd, 10) == b"12345"
    os.close(fd)
    stats = json.loads((mnt / ".shardfs" / "stats.json").read_text())
    assert stats["requests"]["read"] >= 1
    assert stats["bytes_served"]["from_mappings"] >= 5
    for key in ("hits", "misses", "evictions", "bytes_decoded"):
        assert key in stats["cache"]
    assert (mnt / ".shardfs" / "errors").read_text() == ""
    # counters are live: a second snapshot sees the reads made since
    read_through(mnt / "x")
    again = json.loads((mnt / ".shardfs" / "stats.json").read_text())
    assert again["requests"]["read"] > stats["requests"]["read"] or \
        again["requests"]["open"] > stats["requests"]["open"]


def test_live_source(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    (src / "old").write_bytes(b"A" * 100000)
    mnt = mount(src)
    assert os.listdir(mnt) == ["old"]
    # a file written under a temporary name and renamed into place appears
    (src / ".tmp-new").write_bytes(b"fresh")
    os.rename(src / ".tmp-new", src / "new")
    deadline = time.monotonic() + 1.5
    while not (mnt / "new").exists():
        assert time.monotonic() < deadline, "new file did not appear within a second"
        time.sleep(0.05)
    assert (mnt / "new").read_bytes() == b"fresh"
    # an open handle keeps the old bytes when the file is replaced
    f = open(mnt / "old", "rb")
    first = f.read(10)
    (src / ".tmp-old").write_bytes(b"B" * 50000)
    os.rename(src / ".tmp-old", src / "old")
    time.sleep(1.2)
    rest = f.read()
    f.close()
    assert first + rest == b"A" * 100000
    assert (mnt / "old").read_bytes() == b"B" * 50000
    # removed files disappear
    os.unlink(src / "new")
    time.sleep(1.2)
    assert not (mnt / "new").exists()
    assert sorted(os.listdir(mnt)) == ["old"]


def run(*args, timeout=30):
    return subprocess.run([str(SHARDFS), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def test_cli_help_and_version():
    r = run("--help")
    assert r.returncode == 0 and "usage: shardfs SRC MNT" in r.stdout
    for opt in ("--cache-size", "--threads", "-o", "-f", "-d", "--index-dir"):
        assert opt in r.stdout
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("shardfs ")


def test_cli_bad_arguments(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        ((), "missing SRC and MNT"),
        ((tmp_path / "nope", empty), "No such file or directory"),
        ((afile, empty), "is not a directory"),
        ((full, full), "is not empty"),
        ((full, afile), "is not a directory"),
        ((full, empty, "--cache-size", "lots"), "--cache-size"),
        ((full, empty, "--threads", "0"), "--threads"),
        ((full, empty, "--bogus"), "unknown option"),
        ((full, empty, "--index-dir"), "--index-dir needs a directory"),
        ((full, empty, "--index-dir", tmp_path / "nope"), "--index-dir"),
    ]
    for args, words in cases:
        r = run(*args)
        assert r.returncode != 0, args
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (args, r.stderr)
        assert not is_mounted(empty)


def test_daemon_mode_is_usable_on_return(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello").write_bytes(b"hi there")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        r = run(src, mnt)
        assert r.returncode == 0, r.stderr
        # no waiting: the mount must answer as soon as the command returns
        assert (mnt / "hello").read_bytes() == b"hi there"
    finally:
        unmount(mnt)
    assert not is_mounted(mnt)


def test_sigterm_is_clean(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"a" * 10)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "log"
    p = subprocess.Popen([str(SHARDFS), str(src), str(mnt), "-f"], stderr=open(log, "wb"))
    try:
        deadline = time.monotonic() + 20
        while not is_mounted(mnt):
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.02)
        assert (mnt / "a").read_bytes() == b"a" * 10
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, log.read_text()
        assert "Sanitizer" not in log.read_text()
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_lazy_unmount_with_directories_open_is_clean(tmp_path, mount):
    """A process holding directories open (a SRC one and a view's) through a
    lazy unmount: the kernel ends the connection at their last close
    without a RELEASEDIR, and the daemon still exits 0 having freed what
    they listed (the fixture fails on any sanitizer report)."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"f")
    with tarfile.open(src / "t.tar", "w") as t:
        t.add(src / "d" / "f", arcname="x/m")
    mnt = mount(src)
    fds = [os.open(mnt / p, os.O_RDONLY | os.O_DIRECTORY) for p in ("d", "t", "t/x")]
    try:
        assert [sorted(os.listdir(fd)) for fd in fds] == [["f"], ["x"], ["m"]]
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=True, timeout=20)
    finally:
        for fd in fds:
            os.close(fd)
    assert mount.last.proc.wait(timeout=30) == 0, mount.last.stderr()


@pytest.mark.parametrize("mode", [[], ["--open"]])
def test_reading_more_files_than_descriptors(tmp_path, mode):
    """`cat` of every file of a SRC holding more files than the daemon may
    open descriptors: the kernel keeps inodes read once, each SRC file's
    node its mapping and descriptor, so the daemon has the kernel drop the
    entries read longest ago and every read succeeds (before: EMFILE past
    the limit, in both modes)."""
    src = tmp_path / "src"
    src.mkdir()
    n = 3000
    for i in range(n):
        (src / f"f{i:05d}").write_bytes(b"%d" % i)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "log"
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    p = subprocess.Popen([str(SHARDFS), str(src), str(mnt), "-f", *mode], stderr=open(log, "wb"),
                         preexec_fn=limit)
    try:
        deadline = time.monotonic() + 20
        while not is_mounted(mnt):
            assert time.monotonic() < deadline and p.poll() is None, log.read_text()
            time.sleep(0.02)
        for i in range(n):
            with open(mnt / f"f{i:05d}", "rb") as f:
                assert f.read() == b"%d" % i
        assert (mnt / ".shardfs" / "errors").read_text() == ""
        fds = len(os.listdir(f"/proc/{p.pid}/fd"))
        assert fds < 1024, fds
        unmount(mnt)
        assert p.wait(timeout=30) == 0, log.read_text()
        assert "Sanitizer" not in log.read_text()
    finally:
        unmount(mnt)
        if p.poll() is None:
            p.kill()
            p.wait()


def test_stale_mount_is_reported(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = subprocess.Popen([str(SHARDFS), str(src), str(mnt), "-f"],
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not is_mounted(mnt):
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.02)
        p.kill()
        p.wait()
        r = run(src, mnt)
        assert r.returncode != 0
        assert "stale" in r.stderr and "fusermount3 -u" in r.stderr
    finally:
        unmount(mnt)
    assert not is_mounted(mnt)


def read_soon(path, within=0.8):
    """Reads `path` as soon as the mount serves it, retrying until `within`
    seconds pass; returns (bytes or None, errors seen)."""
    seen = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            return path.read_bytes(), seen
        except OSError as e:
            seen.append(e.errno)
            time.sleep(0.02)
    return None, seen


@pytest.mark.parametrize("opens", [(), ("--open",)], ids=["default", "open"])
def test_changes_show_before_the_entry_timeout(tmp_path, mount, opens):
    """The kernel trusts SRC entries for a second; inotify drops them at once
    when SRC changes, so a replaced file is not stuck on a vanished version
    and a new file shows before the timeout runs out. With --open the first
    open after the rename finds the new file (OPEN answers ESTALE for the
    old one); by default no OPEN comes, and an open made before inotify's
    word is handled reads the old version, whole."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"A" * 100)
    mnt = mount(src, *opens)
    os.stat(mnt / "f")                      # looked up, never read
    assert not (mnt / "new").exists()       # a negative entry is cached
    (src / ".f.tmp").write_bytes(b"B" * 50)
    os.rename(src / ".f.tmp", src / "f")
    (src / ".n.tmp").write_bytes(b"fresh")
    os.rename(src / ".n.tmp", src / "new")
    got, errs = read_soon(mnt / "f")
    if not opens:
        deadline = time.monotonic() + 0.8   # well within the entry timeout
        while got == b"A" * 100 and time.monotonic() < deadline:
            time.sleep(0.01)
            got, errs = read_soon(mnt / "f")
    assert got == b"B" * 50, errs
    got, errs = read_soon(mnt / "new")
    assert got == b"fresh", errs


def test_small_files_are_pushed_at_open(tmp_path, mount):
    """Python's open() sends an IOCTL (isatty): a small file's content goes
    into the page cache then, and the read that follows sends no READ.
    (On /dev/fuse: over io_uring no push is made, see test_io_uring.py.)"""
    src = tmp_path / "src"
    src.mkdir()
    small = os.urandom(128 * 1024)
    (src / "small").write_bytes(small)
    (src / "big").write_bytes(small + b"x")
    mnt = mount(src, "--io-uring", "off")
    before = mount_stats(mnt)
    assert read_through(mnt / "small") == small
    after = mount_stats(mnt)
    assert after["requests"]["ioctl"] - before["requests"]["ioctl"] == 1
    # the one READ is the stats read of `before` (its snapshot predates it)
    assert after["requests"]["read"] - before["requests"]["read"] == 1
    assert after["bytes_served"]["pushed_at_open"] == len(small)
    # once per node: the second open finds the pages in the cache
    assert read_through(mnt / "small") == small
    assert mount_stats(mnt)["bytes_served"]["pushed_at_open"] == len(small)
    # a file over the limit is read as before
    assert read_through(mnt / "big") == small + b"x"
    last = mount_stats(mnt)
    assert last["bytes_served"]["pushed_at_open"] == len(small)
    assert last["requests"]["read"] - after["requests"]["read"] >= 2


def test_no_push_with_one_request_thread(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    (src / "x").write_bytes(b"abc")
    mnt = mount(src, "--threads", "1")
    assert read_through(mnt / "x") == b"abc"
    s = mount_stats(mnt)
    assert s["bytes_served"]["pushed_at_open"] == 0
    assert s["requests"]["read"] >= 1


def test_no_inotify_is_reported_and_changes_still_show(tmp_path, mount):
    """Without inotify (here: no instance allowed) the daemon says so in
    .shardfs/errors, where a user of a daemonized mount can read it, and SRC
    changes still show once the kernel's one-second trust runs out."""
    limit = Path("/proc/sys/fs/inotify/max_user_instances")
    old = limit.read_text()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"A" * 10)
    limit.write_text("0")
    try:
        mnt = mount(src)
        os.stat(mnt / "f")
    finally:
        limit.write_text(old)
    assert "no inotify" in (mnt / ".shardfs" / "errors").read_text()
    (src / ".f.tmp").write_bytes(b"B" * 5)
    os.rename(src / ".f.tmp", src / "f")
    time.sleep(1.2)
    got, errs = read_soon(mnt / "f")
    assert got == b"B" * 5, errs
