"""--max-open: views nobody uses are closed, least recently entered first,
and opened again when entered, with no change a reader sees but inode
numbers (docs/architecture.md, "Open views")."""
import os
import resource
import shutil
import subprocess
import threading
import time

from conftest import (FIXTURES, SANITIZER_MARKS, SHARDFS, is_mounted, mount_stats, read_through,
                      unmount)

MAX = 8
SAMPLES = [
    (FIXTURES / "tet" / "sample.tet", ".tet"),
    (FIXTURES / "tsumugi" / "gold_prod.tsumugi", ".tsumugi"),
    (FIXTURES / "tatami" / "g01_alltypes.tatami", ".tatami"),
    (FIXTURES / "tatami" / "g03_search_full.tatami", ".tatami"),
]


def many(tmp_path, count=200):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(count):
        path, ext = SAMPLES[i % len(SAMPLES)]
        shutil.copy(path, src / f"c{i:03}{ext}")
    return src


def views(mnt):
    return sorted(n for n in os.listdir(mnt) if os.path.isdir(mnt / n))


def tree(root):
    """Every file under a view: relative path -> bytes (read through the
    kernel, the way a data loader does)."""
    out = {}
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = read_through(p)
    return out


def settle(mnt, bound):
    """Waits for the closing thread to bring the open views under `bound`."""
    deadline = time.monotonic() + 20
    while mount_stats(mnt)["views_open"] > bound:
        assert time.monotonic() < deadline, mount_stats(mnt)
        time.sleep(0.05)


def test_views_are_closed_and_reopened_with_the_same_bytes(tmp_path, mount):
    src = many(tmp_path)
    ref = mount(src)
    mnt = mount(src, "--max-open", str(MAX))
    names = views(ref)
    assert len(names) == 200 and sorted(os.listdir(mnt)) == sorted(os.listdir(ref))
    want = {}
    for name in names:
        got = tree(mnt / name)
        want[name] = tree(ref / name)
        assert got == want[name], name
        assert got, name
    s = mount_stats(mnt)
    assert s["containers_opened"] == 200 and s["containers_failed"] == 0
    assert s["views_closed"] >= 150, s
    # the closing thread keeps up with a walk: the bound is exceeded by
    # views whose nodes the kernel has yet to forget, never by many
    assert s["views_open_peak"] <= 4 * MAX, s
    settle(mnt, MAX)
    # a second walk opens every view again and reads the same bytes
    for name in names:
        assert tree(mnt / name) == want[name], name
    s = mount_stats(mnt)
    assert s["containers_opened"] >= 350, s
    assert s["errors"] == 0, (mnt / ".shardfs" / "errors").read_text()


def test_a_reader_keeps_its_view_while_others_are_closed(tmp_path, mount):
    src = many(tmp_path, 60)
    ref = mount(src)
    mnt = mount(src, "--max-open", str(MAX))
    names = views(ref)
    held = names[0]
    path = mnt / held / ".zgroup"
    assert path.is_file()
    want = read_through(ref / held / ".zgroup")
    ino = os.stat(mnt / held).st_ino
    with open(path, "rb") as f:
        head = f.read(5)
        for name in names[1:]:
            tree(mnt / name)
        settle(mnt, MAX)
        # its view is still open (the reader holds it): the name finds it
        opened = mount_stats(mnt)["containers_opened"]
        assert os.stat(mnt / held).st_ino == ino
        assert read_through(path) == want
        assert mount_stats(mnt)["containers_opened"] == opened
        # and the open file goes on reading the same bytes
        rest = f.read()
    assert head + rest == want
    # once let go, walking the others closes it; its path works as before
    before = os.stat(path)
    for name in names[1:]:
        tree(mnt / name)
    settle(mnt, MAX)
    opened = mount_stats(mnt)["containers_opened"]
    after = os.stat(path)
    assert mount_stats(mnt)["containers_opened"] == opened + 1
    assert (after.st_size, after.st_mode, after.st_mtime) == \
        (before.st_size, before.st_mode, before.st_mtime)
    assert read_through(path) == want
    assert tree(mnt / held) == tree(ref / held)


def test_listing_with_attributes_sees_closed_and_open_views_alike(tmp_path, mount):
    """`ls -l` of the directory (READDIRPLUS) after views were closed: every
    view is a directory, entered or not, and stats the same again."""
    src = many(tmp_path, 40)
    mnt = mount(src, "--max-open", str(MAX))
    for name in views(mnt):
        tree(mnt / name)
    settle(mnt, MAX)
    first = {}
    with os.scandir(mnt) as it:
        for e in it:
            st = e.stat(follow_symlinks=False)
            first[e.name] = (st.st_mode, st.st_size)
    assert len(first) == 80
    assert sum(1 for m, _ in first.values() if m & 0o170000 == 0o040000) == 40
    for name, (mode, size) in first.items():
        st = os.lstat(mnt / name)
        assert (st.st_mode, st.st_size) == (mode, size), name
    assert mount_stats(mnt)["errors"] == 0


def test_max_open_is_checked(tmp_path):
    for bad in ("0", "-1", "x", ""):
        r = subprocess.run([str(SHARDFS), str(tmp_path), str(tmp_path), "--max-open", bad],
                           capture_output=True, timeout=10)
        assert r.returncode == 2 and b"--max-open needs a number" in r.stderr, bad


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def test_few_descriptors_no_emfile_and_failures_retried(tmp_path, mount):
    """2,000 containers under RLIMIT_NOFILE 256 (issue 25): readers of every
    view get its bytes, never the daemon's EMFILE; the daemon's descriptors
    stay below the limit; and the views keep their descriptors within their
    documented share ((256 - 192) / 2 = 32), closing unused ones."""
    src = many(tmp_path, count=2000)
    ref = mount(src)
    mnt = tmp_path / "few"
    mnt.mkdir()
    log = tmp_path / "few.log"
    nofile = 256
    proc = subprocess.Popen(
        [str(SHARDFS), str(src), str(mnt), "-f"], stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
    peak = [0]
    stop = threading.Event()

    def watch_fds():
        while not stop.is_set():
            peak[0] = max(peak[0], fd_count(proc.pid))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch_fds, daemon=True)
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(mnt):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        watcher.start()
        names = views(ref)
        assert len(names) == 2000 and views(mnt) == names
        # every view's info.json and first part, from four readers at once
        failures = []

        def read_views(part):
            for name in part:
                for rel in (".shardfs/info.json", sorted(os.listdir(ref / name))[0]):
                    p = mnt / name / rel
                    if os.path.isdir(ref / name / rel):
                        continue
                    try:
                        if read_through(p) != read_through(ref / name / rel):
                            failures.append((name, rel, "bytes differ"))
                    except OSError as e:
                        failures.append((name, rel, e.strerror))

        readers = [threading.Thread(target=read_views, args=(names[i::4],)) for i in range(4)]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
        assert not failures, failures[:10]
        s = mount_stats(mnt)
        assert s["containers_failed"] == 0, (mnt / ".shardfs" / "errors").read_text()
        assert peak[0] < nofile, peak[0]
    finally:
        stop.set()
        unmount(mnt)
        rc = proc.wait(timeout=60)
    err = log.read_text(errors="replace")
    assert rc == 0 and not any(m in err for m in SANITIZER_MARKS), err[-4000:]
