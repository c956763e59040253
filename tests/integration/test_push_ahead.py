"""--push-ahead: after a READDIRPLUS of a view directory the daemon pushes
the content of the small files it listed into the page cache, so that a
first pass over the listed files sends no READ; within the window; a
changed container's files read their new bytes within the documented
delay; decoded parts stay within the cache's budget (docs/options.md)."""
import ctypes
import os
import random
import threading
import time
from pathlib import Path

from conftest import mount_stats
from test_no_open import PER_FILE, make, one_pass, os_read
from test_source_stall import source, timed, wait_stuck  # noqa: F401  (source: a fixture)
from test_tar_compressed import gzip_bytes, small_tar_bytes

LOADER = ("--readdirplus", "always")


def wait_pushed(mnt, least, timeout=30):
    """Waits until the push thread has stored `least` bytes; returns them."""
    deadline = time.monotonic() + timeout
    while (got := mount_stats(mnt)["bytes_served"]["pushed_ahead"]) < least:
        s = mount_stats(mnt)
        assert time.monotonic() < deadline, (f"pushed {got} of {least} bytes",
                                             f"push_stops {s['push_stops']}", s)
        time.sleep(0.05)
    return got


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def held(path):
    """Whether the kernel holds every page of `path` (mmap and mincore,
    which send no request)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if not size:
            return True
        addr = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vec = ctypes.create_string_buffer((size + 4095) // 4096)
            assert _libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
        finally:
            _libc.munmap(addr, size)
        return all(b & 1 for b in vec.raw)
    finally:
        os.close(fd)


def pass_held(mnt, want):
    """one_pass, and the files whose pages the kernel no longer held just
    before their read: this VM's DAMON pages out page-cache pages nobody
    has touched within seconds, pushed ones too (seen: all 60 of
    test_listed_files_read_with_no_request's 2 s after their push), and
    each of those costs a READ again."""
    before = mount_stats(mnt)["requests"]
    dropped = set()
    for rel, data in want.items():
        if not held(mnt / rel):
            dropped.add(rel)
        assert os_read(mnt / rel) == data, rel
    after = mount_stats(mnt)["requests"]
    return {k: after[k] - before[k] for k in PER_FILE}, dropped


def pushed_then_read(mount, src, want, window, pushed):
    """Mounts with --push-ahead `window`, lists f/, waits for the files
    `pushed(names)` names (paths under the mount) to be pushed and reads
    every file (pass_held). Should the kernel have dropped most of those
    before the pass (a DAMON pass in that moment), again on a new mount,
    three times at most. Returns (mount, listed names, the files pushed,
    pass_held's result)."""
    for _ in range(3):
        mnt = mount(src, *LOADER, "--push-ahead", str(window))
        names = os.listdir(mnt / "f")
        assert sorted(names) == sorted(Path(r).name for r in want)
        files = set(pushed(names))
        least = sum(len(want[r]) for r in files)
        assert wait_pushed(mnt, least) == least
        cost, dropped = pass_held(mnt, want)
        if len(files & dropped) < len(files) // 2:
            break
    return mnt, names, files, (cost, dropped)


def test_listed_files_read_with_no_request(tmp_path, mount):
    src = tmp_path / "src"
    want = make(src)
    off = mount(src, *LOADER)
    assert sorted(os.listdir(off / "f")) == sorted(Path(r).name for r in want)
    mnt, _, _, (cost, dropped) = pushed_then_read(mount, src, want, "64M", lambda _: want)
    assert len(dropped) < len(want) // 2, dropped
    # the stats reads around the pass cost a READ or two and a LOOKUP or two
    assert cost["read"] <= 2 + len(dropped) and cost["lookup"] <= 2 and cost["open"] <= 1, \
        (cost, dropped)
    # without it, every file's content is a READ
    assert mount_stats(off)["bytes_served"]["pushed_ahead"] == 0
    assert one_pass(off, want)["read"] >= len(want)


def test_window_bounds_a_listing(tmp_path, mount):
    """A listing pushes at most the window, in listing order (a file counts
    a page at least); the rest is read with a READ each."""
    src = tmp_path / "src"
    want = make(src, most=3000)  # each costs a page
    window = 16 * 4096
    mnt, names, first, (cost, dropped) = pushed_then_read(
        mount, src, want, window, lambda names: [f"f/{n}" for n in names[:16]])
    time.sleep(0.3)  # nothing more comes
    pushed = mount_stats(mnt)["bytes_served"]["pushed_ahead"]
    assert pushed == sum(len(want[r]) for r in first) <= window
    assert len(first) == 16 and len(first & dropped) < 8, dropped
    rest = len(want) - 16
    assert rest <= cost["read"] <= rest + 2 + len(first & dropped), (cost, dropped)


def make_tgz(path, members):
    path.write_bytes(gzip_bytes(small_tar_bytes(members), 1))


def test_changed_container_reads_new_bytes_within_budget(tmp_path, mount):
    """Pushed pages belong to the inode of the container's version they came
    from: a replaced container shows new inodes, whose first reads give the
    new bytes (pushed again) within the documented delay. Parts decoded to
    push stay within --cache-size."""
    src = tmp_path / "src"
    src.mkdir()
    rnd = random.Random(43)
    old = {f"{i:03d}.bin": rnd.randbytes(rnd.randint(1, 12000)) for i in range(80)}
    new = {k: rnd.randbytes(rnd.randint(1, 12000)) for k in old}
    make_tgz(src / "a.tar.gz", old)
    budget = 8 << 20
    mnt = mount(src, *LOADER, "--push-ahead", "64M", "--cache-size", str(budget))
    view = mnt / "a"
    assert sorted(os.listdir(view)) == sorted(old)
    wait_pushed(mnt, sum(map(len, old.values())))
    for name, data in old.items():
        assert os_read(view / name) == data, name
    s = mount_stats(mnt)
    assert s["cache"]["bytes_held"] + s["cache"]["bytes_charged"] <= budget, s["cache"]
    tmp = src / "a.tmp"
    make_tgz(tmp, new)
    os.rename(tmp, src / "a.tar.gz")
    deadline = time.monotonic() + 30
    while True:
        names = sorted(os.listdir(view))
        assert names == sorted(new) or names == [], names  # [] while replaced
        got = {n: os_read(view / n) for n in names}
        assert all(got[n] in (old[n], new[n]) for n in names)
        if got == new:
            break
        assert time.monotonic() < deadline, "the replaced container never showed"
        time.sleep(0.2)


def test_push_stops_when_the_budget_is_short(tmp_path, mount):
    """A window larger than the cache holds: pushing stops once the parts it
    decoded pass half the budget, dropping what waits, rather than evicting
    the parts it decoded before their readers come; every file still reads
    its bytes, and the cache stays within its budget."""
    src = tmp_path / "src"
    src.mkdir()
    rnd = random.Random(44)
    # incompressible: the decoded parts are as large as the members
    members = {f"{i:03d}.bin": rnd.randbytes(rnd.randint(60000, 100000)) for i in range(260)}
    make_tgz(src / "b.tar.gz", members)
    budget = 12 << 20  # what indexing it needs, and less than its 20 MB
    mnt = mount(src, *LOADER, "--push-ahead", "64M", "--cache-size", str(budget))
    assert sorted(os.listdir(mnt / "b")) == sorted(members)
    deadline = time.monotonic() + 30
    while (s := mount_stats(mnt))["push_stops"] == 0:
        assert time.monotonic() < deadline, s["bytes_served"]
        time.sleep(0.05)
    time.sleep(0.3)  # nothing more comes
    pushed = mount_stats(mnt)["bytes_served"]["pushed_ahead"]
    assert 0 < pushed == s["bytes_served"]["pushed_ahead"] < sum(map(len, members.values())) // 2
    for name, data in members.items():
        assert os_read(mnt / "b" / name) == data, name
    c = mount_stats(mnt)["cache"]
    assert c["bytes_held"] + c["bytes_charged"] <= budget, c


def window_of(names, sizes, window):
    """The files a listing queues: the first in listing order whose costs
    (a page at least each) fit the window, stopping at the first that does
    not."""
    took, used = [], 0
    for n in names:
        cost = max(sizes[n], 4096)
        if used + cost > window:
            break
        took.append(n)
        used += cost
    return took


def test_push_waits_while_the_source_is_stuck(source, mount):
    """While a request is stuck at the source, pushing waits instead of
    dropping what was listed (a push would wait there too, and the stall is
    not the listed files' doing): no push reaches the stalled source and
    none stops; once the source answers, every file the listing queued is
    pushed. (Dropping the window here lost pushes whenever a busy machine
    held any request a second.)"""
    src = source()
    rnd = random.Random(45)
    members = {f"sub/{i:03d}.bin": rnd.randbytes(rnd.randint(1, 6000)) for i in range(40)}
    (src.backing / "b.tar").write_bytes(small_tar_bytes(members))
    cold = rnd.randbytes(4 << 20)
    (src.backing / "c.tar").write_bytes(small_tar_bytes({"m.bin": cold}))
    window = 8 * 4096
    mnt = mount(src.mnt, *LOADER, "--push-ahead", str(window))
    sizes = {n.split("/")[1]: len(d) for n, d in members.items()}
    # opened before the outage (a lookup of b/ then checks the source)
    sub = os.open(mnt / "b" / "sub", os.O_RDONLY | os.O_DIRECTORY)
    held = os.open(mnt / "c" / "m.bin", os.O_RDONLY)
    try:
        got = {}
        reader = threading.Thread(
            target=lambda: got.setdefault("m", os.pread(held, 4096, 2 << 20)), daemon=True)
        src.stop()
        try:
            reader.start()
            wait_stuck(mnt, "c/m.bin", "read")
            # the first listing of sub/ answers from what the daemon holds,
            # and queues its window
            names, _ = timed(lambda: os.listdir(sub), what="the listing")
            assert sorted(names) == sorted(sizes)
            time.sleep(1.5)  # a push at the source would now count as stuck
            s = mount_stats(mnt)
            assert s["push_stops"] == 0 and s["bytes_served"]["pushed_ahead"] == 0, s
            assert [w for w in s["stuck"] if w["path"].startswith("b/")] == [], s["stuck"]
            assert reader.is_alive()
        finally:
            src.cont()
        reader.join(timeout=60)
        assert got["m"] == cold[2 << 20:(2 << 20) + 4096]
        want = sum(sizes[n] for n in window_of(names, sizes, window))
        assert wait_pushed(mnt, want) == want
        assert mount_stats(mnt)["push_stops"] == 0
        for n in names:
            assert os_read(mnt / "b" / "sub" / n) == members[f"sub/{n}"], n
    finally:
        os.close(held)
        os.close(sub)
