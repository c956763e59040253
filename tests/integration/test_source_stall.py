"""A source that stops answering stalls only the readers of its files.

SRC is a passthrough FUSE filesystem of our own (tests/helpers/passfs.c)
whose daemon is stopped with SIGSTOP: every system call on its files then
waits, as on a hard NFS mount whose server is gone. Readers holding handles
opened before the outage read pages not in memory and wait; meanwhile
everything that needs no system call on SRC answers at once (stats.json and
errors, which say which files are stuck and since when, stat of the mount
and of .shardfs/, bytes the kernel holds), and the request threads the
source holds never leave none for those. After SIGCONT the same daemon
reads every file exactly again. A container deleted through the client
while a view of it is open is renamed .fuse_hidden<N> by the client: it
shows through as a plain file with no view, and goes away once the view's
last reader is done."""
import errno
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import BUILD, WRITERS, is_mounted, unmount
from relutil import read_fd

sys.path.insert(0, str(WRITERS))
import taridx_writer as xw  # noqa: E402
import tet_writer as tw  # noqa: E402

PASSFS = BUILD / "tests" / "passfs"


def stopped(task):
    """Whether a thread (/proc/PID/task/TID) is stopped by a signal."""
    try:
        stat = (task / "stat").read_text()
    except FileNotFoundError:
        return True  # gone
    # the state follows the parenthesised command name, which may hold spaces
    return stat[stat.rindex(")") + 2] == "T"


class Source:
    """passfs serving `backing` at `mnt`; stop() and cont() pause it."""

    def __init__(self, backing, mnt, log):
        self.backing, self.mnt = backing, mnt
        # the client caches nothing: every stat reaches the daemon
        self.proc = subprocess.Popen(
            [str(PASSFS), str(backing), str(mnt), "-f",
             "-o", "attr_timeout=0,entry_timeout=0,negative_timeout=0"],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
        deadline = time.monotonic() + 20
        while not is_mounted(mnt):
            assert self.proc.poll() is None, "passfs exited"
            assert time.monotonic() < deadline, "passfs did not mount"
            time.sleep(0.02)

    def stop(self):
        """Stops passfs, returning once every one of its threads is
        stopped: a request sent right after the signal could still be
        answered while it lands."""
        self.proc.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + 10
        while not all(stopped(t) for t in tasks.iterdir()):
            assert time.monotonic() < deadline, "passfs did not stop"
            time.sleep(0.005)

    def cont(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def close(self):
        self.cont()
        unmount(self.mnt, timeout=20)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)


@pytest.fixture
def source(tmp_path):
    """source() -> a running passfs over a new backing directory. Always
    continued and unmounted at teardown, even when a test fails stopped
    (tests continue it themselves before their shardfs mount is taken
    down: request it before `mount`)."""
    made = []

    def start():
        backing, mnt = tmp_path / f"backing{len(made)}", tmp_path / f"src{len(made)}"
        backing.mkdir()
        mnt.mkdir()
        made.append(Source(backing, mnt, tmp_path / f"passfs{len(made)}.log"))
        return made[-1]

    yield start
    for s in made:
        s.close()


def timed(fn, limit=10, what="a call"):
    """(fn's result, seconds taken); a call that has not answered within
    `limit` seconds fails the test, named `what`, instead of hanging it
    (the caller's finally lets the source go, which frees the waiting
    thread)."""
    got = {}

    def run():
        try:
            got["out"] = fn()
        except BaseException as e:  # noqa: BLE001  (re-raised below)
            got["err"] = e

    t = time.monotonic()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit)
    assert not th.is_alive(), f"{what}: no answer within {limit} s"
    if "err" in got:
        raise got["err"]
    return got["out"], time.monotonic() - t


def stats(mnt):
    with open(mnt / ".shardfs" / "stats.json", "rb", buffering=0) as f:
        return json.loads(f.read(1 << 20))


def cold_tree(root):
    """Containers whose payloads no listing touches, and what lies where.
    Returns {mount path: (offset, expected bytes)} of reads made only
    during the outage."""
    rng = np.random.default_rng(30)
    big = rng.bytes(16 << 20)
    (root / "big.bin").write_bytes(big)
    members = [rng.bytes(2 << 20) for _ in range(3)]
    xw.write_fold(root, "fold", [(f"{i:06d}", {"bin": m}) for i, m in enumerate(members)])
    a = rng.integers(0, 256, (1024, 1024), dtype=np.uint8)
    tw.write_tet(str(root / "w.tet"), [tw.Dataset(b"x", a, (512, 512), codec="zstd")])
    (root / "small.txt").write_bytes(b"held by the kernel\n")
    tile = np.ascontiguousarray(a[512:, 512:]).tobytes()
    return {"big.bin": (12 << 20, big[12 << 20:13 << 20]),
            "fold/000002.bin": (1 << 20, members[2][1 << 20:]),
            "w/x/1.1": (0, tile)}


def test_stall_stays_with_its_files(source, mount):
    src = source()
    cold = cold_tree(src.backing)
    # few threads: the stuck readers outnumber them. Over either transport
    # (SHARDFS_IO_URING=on: each queue has an entry for every thread its
    # pool may run, and a ring thread that never calls into SRC, fs/transport/uring.c)
    mnt = mount(src.mnt, "--threads", "2")
    daemon = mount.last.proc
    handles = {p: os.open(mnt / p, os.O_RDONLY) for p in cold}
    small = os.open(mnt / "small.txt", os.O_RDONLY)
    try:
        stall_and_read(src, mnt, daemon, cold, handles, small)
    finally:
        # an open file would keep the daemon alive past a lazy unmount
        for fd in [*handles.values(), small]:
            os.close(fd)
    wait_unstuck(mnt)
    # stuck lines last only while requests wait
    assert "stuck" not in (mnt / ".shardfs" / "errors").read_text()


def readers_done(readers, results):
    """Joins the readers once the source is back: each got its exact bytes
    (True), or EIO when the pool had no thread left to give the source."""
    for t in readers:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in readers)
    assert all(r is True or r == errno.EIO for r in results.values()), results


def stall_and_read(src, mnt, daemon, cold, handles, small):
    """The body of test_stall_stays_with_its_files, with its files open."""
    assert os.read(small, 100) == b"held by the kernel\n"
    for p, fd in handles.items():
        assert len(os.pread(fd, 4096, 0)) == 4096  # opened, first pages read
    results = {}
    print("transport:", stats(mnt)["transport"], flush=True)

    def reader(i, path):
        off, want = cold[path]
        try:
            results[i] = os.pread(handles[path], len(want), off) == want
        except OSError as e:
            results[i] = e.errno

    readers = [threading.Thread(target=reader, args=(i, p), daemon=True)
               for i, p in enumerate(list(cold) * 3)]
    src.stop()
    try:
        for t in readers:
            t.start()
        # stats.json and errors answer at once all along, and say which
        # files are stuck and since when
        took, stuck, deadline = [], [], time.monotonic() + 20
        while time.monotonic() < deadline:
            s, dt = timed(lambda: stats(mnt), what="stats.json")
            took.append(dt)
            stuck = [w for w in s["stuck"] if w["path"] in cold]
            # on a loaded machine the second reader may reach the source
            # well after the first has waited its 1.5 s
            if stuck and stuck[0]["seconds"] >= 1.5 and s["at_source"] >= 2:
                break
            time.sleep(0.05)
        assert stuck, s
        assert stuck[0]["request"] == "read" and stuck[0]["since"].endswith("Z")
        assert s["at_source"] >= 2
        text, dt = timed(lambda: (mnt / ".shardfs" / "errors").read_text(), what="errors")
        took.append(dt)
        path = stuck[0]["path"]
        assert any(line.split(" ", 1)[1].startswith(f"{path}: stuck: a read request has run for")
                   for line in text.splitlines()), text
        # the mount's root and .shardfs/, and bytes the kernel holds
        for what, fn in {"stat of the root": lambda: os.stat(mnt),
                         "stat of .shardfs": lambda: os.stat(mnt / ".shardfs"),
                         "stat of stats.json": lambda: os.stat(mnt / ".shardfs" / "stats.json"),
                         "read of small.txt": lambda: os.pread(small, 100, 0),
                         "listing of .shardfs": lambda: os.listdir(mnt / ".shardfs")}.items():
            took.append(timed(fn, what=what)[1])
        assert sum(t.is_alive() for t in readers) >= 2  # still waiting
        # honest margins on a shared 2-CPU machine under sanitizers: the
        # typical answer is well under 100 ms, none waits on the source
        print(f"answers during the outage: {len(took)}, median "
              f"{statistics.median(took) * 1000:.1f} ms, max {max(took) * 1000:.1f} ms")
        assert statistics.median(took) < 0.1, took
        assert max(took) < 1.0, took
    finally:
        src.cont()
    readers_done(readers, results)
    assert sum(r is True for r in results.values()) >= 2, results
    # the same daemon reads everything exactly again, old handles and new
    assert daemon.poll() is None
    for p, (off, want) in cold.items():
        assert os.pread(handles[p], len(want), off) == want
        with open(mnt / p, "rb") as f:
            f.seek(off)
            assert f.read(len(want)) == want


# by default inotify's word lets the view go, with no RELEASE to wait for;
# with --open, its last RELEASE does
@pytest.mark.parametrize("opens", [(), ("--open",)], ids=["default", "open"])
def test_silly_renamed_container(source, mount, opens):
    src = source()
    a = np.arange(64 * 64, dtype="<u4").reshape(64, 64)
    tw.write_tet(str(src.backing / "w.tet"), [tw.Dataset(b"x", a, (32, 32))])
    container = (src.backing / "w.tet").read_bytes()
    mnt = mount(src.mnt, *opens)
    want = np.ascontiguousarray(a[:32, 32:]).tobytes()
    f = open(mnt / "w" / "x" / "0.1", "rb")
    try:
        assert f.read() == want
        # deleted through the client while shardfs holds it: the client
        # renames it .fuse_hidden<N> and removes it at its last release
        os.unlink(src.mnt / "w.tet")
        hidden = [p for p in os.listdir(src.backing) if p.startswith(".fuse_hidden")]
        assert len(hidden) == 1, os.listdir(src.backing)
        assert (src.backing / hidden[0]).read_bytes() == container
        # shown as the plain file it is, with no view
        names = os.listdir(mnt)
        assert hidden[0] in names and "w" not in names, names
        assert not any(n.startswith(".fuse_hidden") and n != hidden[0] for n in names)
        assert os.stat(mnt / hidden[0]).st_size == len(container)
        # its open view keeps reading the bytes it opened
        f.seek(0)
        assert f.read() == want
    finally:
        f.close()
    # once its last reader is done, shardfs lets the container go
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and hidden[0] in os.listdir(src.backing):
        time.sleep(0.05)
    assert hidden[0] not in os.listdir(src.backing)


def quick_answers(calls, tries=5):
    """Runs each of `calls` ({name: fn}) `tries` times while the source is
    stopped; prints each one's median and slowest, and asserts that each
    answers within 100 ms (its median: a shared 2-CPU machine under
    sanitizers can pause any one try) and none waits on the source."""
    took = {name: [] for name in calls}
    for _ in range(tries):
        for name, fn in calls.items():
            took[name].append(timed(fn, what=name)[1])
    for name, t in took.items():
        print(f"{name}: median {statistics.median(t) * 1000:.1f} ms, "
              f"max {max(t) * 1000:.1f} ms over {len(t)}")
    slow = {n: t for n, t in took.items() if statistics.median(t) >= 0.1 or max(t) >= 1.0}
    assert not slow, slow


def wait_unstuck(mnt):
    """Waits until stats.json lists no stuck request (a stat's snapshot
    serves the thread's next open for up to 5 s)."""
    deadline = time.monotonic() + 10
    while stats(mnt)["stuck"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stats(mnt)["stuck"] == []


def wait_stuck(mnt, path, request):
    """stats.json's stuck request on `path` once it has waited 1.5 s."""
    deadline, s = time.monotonic() + 20, None
    while time.monotonic() < deadline:
        s, _ = timed(lambda: stats(mnt))
        hit = [w for w in s["stuck"] if w["path"] == path]
        if hit and hit[0]["seconds"] >= 1.5:
            assert hit[0]["request"] == request, hit
            return hit[0]
        time.sleep(0.05)
    raise AssertionError(f"{path} never stuck: {s}")


def errors_name(mnt, path):
    text = (mnt / ".shardfs" / "errors").read_text()
    assert any(line.split(" ", 1)[1].startswith(f"{path}: stuck:")
               for line in text.splitlines()), text
    return text


def read_closed(dir_fd, name, drop=False):
    """The bytes of file `name` of directory `dir_fd`, opened and closed;
    with `drop`, its pages dropped from the page cache first, so that the
    read reaches the daemon."""
    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    try:
        if drop:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def read_dir_fresh(dir_fd):
    """A new OPENDIR of the directory `dir_fd` is open on, listed."""
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd)
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def list_in_outage(src, mnt, open_dir, path, calls):
    """Lists the directory open_dir() opens anew (its OPENDIR) in a thread
    while the source is stopped; once that is stuck on `path`, each of
    `calls` must answer quickly (quick_answers). Returns the names it
    listed once the source answers again."""
    done = {}

    def lister():
        fd = open_dir()
        try:
            done["names"] = sorted(os.listdir(fd))
        finally:
            os.close(fd)

    thread = threading.Thread(target=lister, daemon=True)
    src.stop()
    try:
        thread.start()
        wait_stuck(mnt, path, "opendir")
        quick_answers(calls)
        assert thread.is_alive() and "names" not in done
    finally:
        src.cont()
    thread.join(timeout=60)
    assert not thread.is_alive()
    return done["names"]


def test_stall_holding_a_view(source, mount):
    """Lazy work of a view (the fold's listing, which reads every member's
    tar header) waits on the source: what the same view already holds
    answers meanwhile, since lazy work runs in the view's turn holding no
    lock, and a find in a directory already listed takes only the view's
    names lock."""
    src = source()
    rng = np.random.default_rng(31)
    members = [rng.bytes(1 << 20) for _ in range(6)]
    xw.write_fold(src.backing, "fold", [(f"{i:06d}", {"bin": m}) for i, m in enumerate(members)])
    mnt = mount(src.mnt, "--threads", "2")
    daemon = mount.last.proc
    # entered through its .shardfs/ (an OPENDIR of the fold's root would
    # list it): the members' headers are not read yet
    meta = os.open(mnt / "fold" / ".shardfs", os.O_RDONLY | os.O_DIRECTORY)
    cached = os.open(mnt / "fold" / ".shardfs" / "info.json", os.O_RDONLY)
    try:
        holding_a_view(src, mnt, daemon, members, meta, cached)
    finally:
        # an open file would keep the lazily unmounted daemon alive
        os.close(cached)
        os.close(meta)
    wait_unstuck(mnt)


def holding_a_view(src, mnt, daemon, members, meta, cached):
    """The body of test_stall_holding_a_view, with its files open."""
    info = {n: (mnt / "fold" / ".shardfs" / n).read_bytes() for n in ("info.json", "info.txt")}
    # ".." of .shardfs: no lookup of "fold" in SRC, whose entry the
    # kernel asks again after a second
    names = list_in_outage(
        src, mnt, lambda: os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=meta), "fold", {
            "stats.json": lambda: stats(mnt),
            "errors": lambda: errors_name(mnt, "fold"),
            # names of the view the kernel has not asked for yet, found in
            # a directory the view listed when it opened
            "lookup rows": lambda: os.stat("rows", dir_fd=meta),
            "lookup of no name": lambda: pytest.raises(
                FileNotFoundError, os.stat, "nothing", dir_fd=meta),
            "opendir+readdir .shardfs": lambda: read_dir_fresh(meta),
            "read cached": lambda: os.pread(cached, 1 << 16, 0),
        })
    # the same daemon lists and reads the fold exactly
    assert daemon.poll() is None
    assert names == [f"{i:06d}.bin" for i in range(len(members))]
    for i, m in enumerate(members):
        assert (mnt / "fold" / f"{i:06d}.bin").read_bytes() == m
        assert (mnt / "fold" / ".shardfs" / "rows" / str(i)).read_bytes() == m
    for n, b in info.items():
        assert (mnt / "fold" / ".shardfs" / n).read_bytes() == b
    assert os.pread(cached, len(info["info.json"]) + 1, 0) == info["info.json"]


def test_stall_holding_a_listing(source, mount):
    """A directory's first whole listing waits on the source: requests for
    what the directory already holds (a view entered before, its listed
    directories and cached bytes, the directory's own attributes) answer
    meanwhile, since no listing is computed under a lock."""
    src = source()
    d = src.backing / "d"
    d.mkdir()
    a = np.arange(256 * 256, dtype="<u4").reshape(256, 256)
    tw.write_tet(str(d / "w.tet"), [tw.Dataset(b"x", a, (128, 128))])
    tw.write_tet(str(d / "v.tet"), [tw.Dataset(b"y", a[:64], (64, 64))])
    (d / "plain.txt").write_bytes(b"plain\n")
    mnt = mount(src.mnt, "--threads", "2")
    # the view w entered by name (a partial listing of d), its x/ listed;
    # d itself never listed, held only by a path descriptor
    dpath = os.open(mnt / "d", os.O_PATH)
    x = os.open(mnt / "d" / "w" / "x", os.O_RDONLY | os.O_DIRECTORY)
    w = os.open("..", os.O_PATH, dir_fd=x)
    fds = [x, w, dpath]
    try:
        holding_a_listing(src, mnt, a, dpath, x, w, fds)
    finally:
        # an open file would keep the lazily unmounted daemon alive
        for fd in fds:
            os.close(fd)
    wait_unstuck(mnt)


def holding_a_listing(src, mnt, a, dpath, x, w, fds):
    """The body of test_stall_holding_a_listing, with its files open (fds,
    which it adds to)."""
    tiles = sorted(os.listdir(x))
    assert "0.1" in tiles, tiles
    want = np.ascontiguousarray(a[:128, 128:]).tobytes()
    tile = os.open("0.1", os.O_RDONLY, dir_fd=x)
    fds.append(tile)
    assert os.pread(tile, len(want) + 1, 0) == want
    names = list_in_outage(
        src, mnt, lambda: os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=dpath), "d", {
            "stats.json": lambda: stats(mnt),
            "errors": lambda: errors_name(mnt, "d"),
            "getattr d": lambda: os.stat(dpath),
            # names the kernel has not asked for yet (a tile would be
            # built on its first lookup, which reads the container)
            "lookup in the view": lambda: os.stat(".shardfs", dir_fd=w),
            "lookup of no name": lambda: pytest.raises(
                FileNotFoundError, os.stat, "nothing", dir_fd=w),
            "opendir+readdir of its listed x/": lambda: read_dir_fresh(x),
            "read cached": lambda: os.pread(tile, 4096, 0),
        })
    assert names == ["plain.txt", "v", "v.tet", "w", "w.tet"]
    assert read_dir_fresh(x) == tiles
    assert os.pread(tile, len(want) + 1, 0) == want
    with open(mnt / "d" / "v" / "y" / "0.0", "rb") as f:
        assert f.read() == np.ascontiguousarray(a[:64, :64]).tobytes()
    assert (mnt / "d" / "plain.txt").read_bytes() == b"plain\n"


def test_known_names_answer_while_the_source_holds_the_pool(source, mount):
    """With two request threads, four readers stuck at the source hold all
    the pool gives the source (four of six), so requests that may read the
    source are refused (EIO); a lookup of a name a view already holds, or
    knows absent, reads nothing and answers (it took a place at the source
    too, and was refused whenever a release or a forget was in flight
    beside a stuck request), and so do an OPENDIR and a READDIRPLUS of a
    view's directory listed before (both were refused), the RELEASE of a view's file (whose
    check of a gone container took the last threads), and a READ of a file held in memory
    (info.json, refused once its pages left the page cache). Over /dev/fuse in both passes: one pool, so
    all four readers are surely in the lookup's (io_uring has a pool per CPU;
    test_stall_holding_a_view covers it)."""
    src = source()
    rng = np.random.default_rng(37)
    members = [rng.bytes(1 << 20) for _ in range(4)]
    xw.write_fold(src.backing, "fold", [(f"{i:06d}", {"bin": m}) for i, m in enumerate(members)])
    mnt = mount(src.mnt, "--threads", "2", "--io-uring", "off")
    meta = os.open(mnt / "fold" / ".shardfs", os.O_RDONLY | os.O_DIRECTORY)
    # opened (built) before the outage; their second halves are not read yet
    handles = [os.open(mnt / "fold" / f"{i:06d}.bin", os.O_RDONLY) for i in range(len(members))]
    try:
        known_names(src, mnt, members, meta, handles)
    finally:
        # an open file would keep the lazily unmounted daemon alive
        for fd in [*handles, meta]:
            os.close(fd)
    wait_unstuck(mnt)


def known_names(src, mnt, members, meta, handles):
    """The body of test_known_names_answer_while_the_source_holds_the_pool,
    with its files open."""
    info = (mnt / "fold" / ".shardfs" / "info.json").read_bytes()
    results = {}

    def reader(i):
        try:
            results[i] = os.pread(handles[i], 4096, 3 << 18) == members[i][3 << 18:(3 << 18) + 4096]
        except OSError as e:
            results[i] = e.errno

    readers = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(len(members))]
    src.stop()
    try:
        for t in readers:
            t.start()
        deadline, s = time.monotonic() + 20, None
        while time.monotonic() < deadline:
            s, _ = timed(lambda: stats(mnt))
            if s["at_source"] >= 4 and s["stuck"] and s["stuck"][0]["seconds"] >= 1.5:
                break
            time.sleep(0.05)
        assert s["at_source"] >= 4 and s["stuck"], s
        for _ in range(5):
            assert timed(lambda: os.stat("rows", dir_fd=meta))[1] < 1.0
            assert timed(lambda: os.stat("info.json", dir_fd=meta))[1] < 1.0
            with pytest.raises(FileNotFoundError):
                timed(lambda: os.stat("nothing", dir_fd=meta))
            # .shardfs/ opened again and listed, first here (complete when
            # the view opened, and its entries' nodes made: its READDIRPLUS
            # makes none; later listings are the kernel's), and files of the
            # view closed: none takes a thread at the source (the release's
            # check of a gone container is skipped)
            listed = timed(lambda: read_dir_fresh(meta))[0]
            assert {"info.json", "info.txt", "rows"} <= set(listed), listed
            assert timed(lambda: read_closed(meta, "info.json"))[0] == info
            # its pages gone from the page cache (this VM's DAMON drops
            # cold ones within seconds): its READ reads memory only
            assert timed(lambda: read_closed(meta, "info.json", drop=True))[0] == info
    finally:
        src.cont()
    readers_done(readers, results)
    assert (mnt / "fold" / ".shardfs" / "info.json").read_bytes() == info
    for i, m in enumerate(members):
        assert os.pread(handles[i], len(m) + 1, 0) == m


def test_stuck_readers_after_a_quiet_second(source, mount):
    """One request thread: a pool of 1 + 1 kept free, twice that while the
    source holds threads (four). A first outage grows it to three; after a
    quiet second the idle threads sleep untimed (no watch). Then two
    readers, one after the other, are held in a fstat of the stopped source
    where nobody hands the lead on: the thread woken to lead after the first
    must wake the last one when the second holds it too, or nobody leads and
    stats.json never answers (it did not, every time, before the fix)."""
    one_thread_fold(source, mount, 38, quiet_second)


def one_thread_fold(source, mount, seed, body):
    """A fold of three 1 MiB members and a directory `d` of four one-byte
    files on a passfs source, mounted with one request thread: runs
    body(src, mnt, members, handles) with the members open, then lets the
    source go and waits until nothing is stuck."""
    src = source()
    rng = np.random.default_rng(seed)
    members = [rng.bytes(1 << 20) for _ in range(3)]
    xw.write_fold(src.backing, "fold", [(f"{i:06d}", {"bin": m}) for i, m in enumerate(members)])
    (src.backing / "d").mkdir()
    for k in range(4):
        (src.backing / "d" / f"x{k}").write_bytes(b"%d" % k)
    mnt = mount(src.mnt, "--threads", "1", "--io-uring", "off")
    handles = [os.open(mnt / "fold" / f"{i:06d}.bin", os.O_RDONLY) for i in range(3)]
    try:
        body(src, mnt, members, handles)
    finally:
        src.cont()
        for fd in handles:
            os.close(fd)
    wait_unstuck(mnt)


def quiet_second(src, mnt, members, handles):
    """The body of test_stuck_readers_after_a_quiet_second, with its files
    open."""
    results = {}

    def reader(i, at):
        try:
            results[i, at] = os.pread(handles[i], 4096, at) == members[i][at:at + 4096]
        except OSError as e:
            results[i, at] = e.errno

    def start(i, at):
        t = threading.Thread(target=reader, args=(i, at), daemon=True)
        t.start()
        return t

    def wait_at_source(n):
        deadline, s = time.monotonic() + 20, None
        while time.monotonic() < deadline:
            s, _ = timed(lambda: stats(mnt))
            if s["at_source"] >= n:
                return
            time.sleep(0.05)
        raise AssertionError(f"{n} requests never reached the source: {s}")

    # the first outage: a reader held, the pool grows to three threads
    src.stop()
    first = [start(0, 0)]
    try:
        wait_at_source(1)
        for _ in range(3):
            timed(lambda: stats(mnt))
    finally:
        src.cont()
    readers_done(first, results)
    # a quiet second, then two readers held one after the other
    time.sleep(1.5)
    src.stop()
    held = [start(1, 3 << 18)]
    try:
        wait_at_source(1)
        held.append(start(2, 3 << 18))
        wait_at_source(2)
        for _ in range(5):
            assert timed(lambda: stats(mnt))[1] < 1.0
    finally:
        src.cont()
    readers_done(held, results)
    assert all(r is True for r in results.values()), results


def test_last_thread_waits_for_a_burst_to_pass(source, mount):
    """One request thread: the source may hold three of the pool's four, the
    last kept for requests that need none. Three readers held by the
    stopped source over 0.1 s take the three; a lookup of a SRC file, which
    would take the last, waits for one of them to leave rather than fail
    at once: the source answers again 20 ms later, and the stat answers
    right. A quick burst (one user's 16 lookups on a busy machine) so no
    longer fails another user's open. Left stopped, the lookup is refused
    (EIO) after its 0.1 s, and stats.json answers again."""
    one_thread_fold(source, mount, 41, burst_then_last)


def burst_then_last(src, mnt, members, handles):
    """The body of test_last_thread_waits_for_a_burst_to_pass, its files
    open. Each round reads a fresh quarter of the members and looks up a
    fresh name; a round whose lookup reached the daemon only after the
    source was back, or whose source took over 0.1 s to answer again (a
    slow machine), proves nothing and is made again."""
    os.stat(mnt / "d")
    def hold(round_, count):
        results, done = {}, {}
        at = round_ << 18

        def reader(i):
            try:
                results[i] = os.pread(handles[i], 4096, at) == members[i][at:at + 4096]
            except OSError as e:
                results[i] = e.errno
            done[i] = time.monotonic()

        threads = []
        for i in range(count):
            threads.append(threading.Thread(target=reader, args=(i,), daemon=True))
            threads[-1].start()
            deadline = time.monotonic() + 20
            while stats(mnt)["at_source"] < i + 1:
                assert time.monotonic() < deadline, f"reader {i} never reached the source"
                time.sleep(0.02)
        time.sleep(0.15)  # the third, past the kept threads, counts after 0.1 s
        return threads, results, done

    waited = False
    for round_ in range(3):
        before = stats(mnt)["last_thread_waits"]
        src.stop()
        try:
            threads, results, done = hold(round_, 3)
            t0 = time.monotonic()

            def last():
                try:
                    results[3] = os.stat(mnt / "d" / f"x{round_}").st_size == 1
                except OSError as e:
                    results[3] = e.errno
                done[3] = time.monotonic()
            fourth = threading.Thread(target=last, daemon=True)
            fourth.start()
            time.sleep(0.02)
            back = time.monotonic()
        finally:
            src.cont()
        threads.append(fourth)
        readers_done(threads, results)
        # refused before the source came back: the old rule, no wait
        assert not (results[3] == errno.EIO and done[3] < back), (results, done[3] - t0)
        if results[3] is True and stats(mnt)["last_thread_waits"] > before:
            assert all(r is True for r in results.values()), results
            waited = True
            break
    assert waited, "the lookup never waited for the last thread and read right"
    # left stopped: refused once its wait is over, and stats.json answers again
    before = stats(mnt)["last_thread_waits"]
    src.stop()
    try:
        threads, results, done = hold(3, 3)
        with pytest.raises(OSError) as e:
            timed(lambda: os.stat(mnt / "d" / "x3"), what="the lookup")
        assert e.value.errno == errno.EIO
        assert timed(lambda: stats(mnt))[1] < 1.0
        assert stats(mnt)["last_thread_waits"] > before
    finally:
        src.cont()
    readers_done(threads, results)
    assert "held every request thread but the one kept" in (mnt / ".shardfs" / "errors").read_text()


def test_replaced_through_the_client_before_first_read(source, mount):
    """A FUSE client keeps a file it was asked to open (.fuse_hidden<N>
    when deleted or renamed over), not one only looked up (an O_PATH
    descriptor sends it no OPEN): a file opened through shardfs and
    replaced through the client before its first read is still read whole
    in the version opened, as the lookup opened it (no-open: nothing but
    the lookup comes before that read; fs/src.c)."""
    src = source()
    rnd = random.Random(7)
    names = [f"{i}.bin" for i in range(4)]
    old = {n: rnd.randbytes(rnd.randint(1, 200000)) for n in names}
    new = {n: rnd.randbytes(rnd.randint(1, 200000)) for n in names}
    for n in names:
        (src.backing / n).write_bytes(old[n])
    mnt = mount(src.mnt)
    fds = {n: os.open(mnt / n, os.O_RDONLY) for n in names}
    try:
        for n in names:
            (src.backing / (n + ".tmp")).write_bytes(new[n])
            os.rename(src.mnt / (n + ".tmp"), src.mnt / n)
        for n in names:
            assert read_fd(fds[n]) == old[n], n
    finally:
        for fd in fds.values():
            os.close(fd)
