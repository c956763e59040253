"""A stat of a view root opens nothing (fs/roots.h): a lookup of a view whose
container the listing only checked answers from the listing entry, and the
container is opened when the view is first entered, its attributes as they
were. Formats whose view reads other files (taridx) are opened when looked
up, as before."""
import os
import shutil
import stat
import subprocess
import threading
import time
from contextlib import contextmanager

from conftest import FIXTURES, mount_stats

TET = FIXTURES / "tet" / "sample.tet"
COUNT = 300
SHOWN = [".zattrs", ".zgroup", ".zmetadata", "temperature", "temperature.npy"]  # the sample's view


def opened(mnt):
    return mount_stats(mnt)["containers_opened"]


def attrs(p):
    """Everything stat shows of a path (or a pinned descriptor), the inode
    number included."""
    s = os.fstat(p) if isinstance(p, int) else os.lstat(p)
    return (s.st_ino, s.st_mode, s.st_nlink, s.st_size, s.st_uid, s.st_gid,
            s.st_mtime_ns, s.st_ctime_ns)


def containers(tmp_path, count=COUNT):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(count):
        shutil.copy(TET, src / f"c{i:03}.tet")
    # owners and modes of every kind: the view shows its container's
    os.chmod(src / "c001.tet", 0o640)
    os.chown(src / "c001.tet", 1234, 5678)
    os.chmod(src / "c002.tet", 0o400)
    os.chmod(src / "c003.tet", 0o604)
    return src


def expected(src_file):
    """A view root's attributes from its container: a directory, write bits
    cleared and x where r is (docs/security.md)."""
    s = os.stat(src_file)
    r = stat.S_IMODE(s.st_mode) & 0o444
    return (stat.S_IFDIR | r | r >> 2, 2, 0, s.st_uid, s.st_gid, s.st_mtime_ns,
            s.st_ctime_ns)


@contextmanager
def pin(mnt, names):
    """Keeps the kernel from forgetting the nodes (dropped caches make it
    look names up again, as new inodes), and gives their attributes as
    pinned: taken before pinning, a node the kernel forgot in between would
    come back as another inode. O_PATH opens nothing. The descriptors are
    closed whatever happens, so the unmount at teardown is never busy."""
    fds = {}
    try:
        for n in names:
            fds[n] = os.open(mnt / n, os.O_PATH | os.O_NOFOLLOW)
        yield {n: attrs(fd) for n, fd in fds.items()}
    finally:
        for fd in fds.values():
            os.close(fd)


def wait_past_timeout():
    """The kernel keeps a SRC directory's entries for a second: past it, a
    stat asks the daemon again."""
    time.sleep(1.2)


def test_stat_of_every_view_root_opens_none(tmp_path, mount):
    src = containers(tmp_path)
    mnt = mount(src)
    out = subprocess.run(["ls", "-l", str(mnt)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sum(1 for line in out.stdout.splitlines() if line.startswith("d")) == COUNT
    with pin(mnt, ("c001", "c002", "c003")) as roots:
        roots.update({f"c{i:03}": attrs(mnt / f"c{i:03}") for i in range(COUNT)
                      if f"c{i:03}" not in roots})
        assert opened(mnt) == 0
        for name, a in roots.items():
            assert a[1:] == expected(src / f"{name}.tet"), name
        assert len({a[0] for a in roots.values()}) == COUNT
        # entering one opens exactly that one; its attributes do not change
        assert sorted(os.listdir(mnt / "c001")) == SHOWN
        assert opened(mnt) == 1
        assert attrs(mnt / "c001") == roots["c001"]
        assert (mnt / "c002" / "temperature" / ".zarray").is_file()
        assert opened(mnt) == 2
        wait_past_timeout()
        for name in ("c001", "c002", "c003"):
            assert attrs(mnt / name) == roots[name], name
        assert opened(mnt) == 2
    assert mount_stats(mnt)["errors"] == 0


def test_listing_with_attributes_places_view_roots(tmp_path, mount):
    """READDIRPLUS gives a view root not opened yet its attributes too, as
    its lookup would: `ls -l` then looks none of them up (past the first
    request too: the GETATTRs of its probes, fs/dirs.c, showed the names
    used), and opens none."""
    src = containers(tmp_path)
    mnt = mount(src)

    def lookups():
        return mount_stats(mnt)["requests"]["lookup"]

    before = lookups()
    with os.scandir(mnt) as it:
        seen = {e.name: e.stat(follow_symlinks=False) for e in it}
    # the stats.json reads: a LOOKUP or two
    assert lookups() - before <= 8, lookups() - before
    assert opened(mnt) == 0
    for i in range(COUNT):
        st = seen[f"c{i:03}"]
        assert (st.st_mode, st.st_nlink, st.st_size, st.st_uid, st.st_gid, st.st_mtime_ns,
                st.st_ctime_ns) == expected(src / f"c{i:03}.tet")
        assert st.st_ino == os.lstat(mnt / f"c{i:03}").st_ino
    assert opened(mnt) == 0


def test_stat_before_any_listing_opens_none(tmp_path, mount):
    """Lookups that place views one by one (no listing yet) and the full
    listing that follows them open nothing either, and keep the inodes."""
    src = containers(tmp_path)
    mnt = mount(src)
    with pin(mnt, (f"c{i:03}" for i in range(COUNT))) as first:
        assert opened(mnt) == 0
        assert len(os.listdir(mnt)) == 2 * COUNT
        wait_past_timeout()
        assert {n: attrs(mnt / n) for n in first} == first
        assert opened(mnt) == 0
        assert os.listdir(mnt / "c299") and opened(mnt) == 1
        assert attrs(mnt / "c299") == first["c299"]


def test_racing_entries_open_each_container_once(tmp_path, mount):
    """Threads entering the same unopened view together: one open, one
    inode, every thread sees its content."""
    src = containers(tmp_path, 40)
    mnt = mount(src)
    with pin(mnt, (f"c{i:03}" for i in range(40))) as before:
        racing_entries(mnt, before)


def racing_entries(mnt, before):
    """Eight threads enter the 40 pinned views together."""
    assert opened(mnt) == 0
    seen, errors = [], []
    start = threading.Barrier(8)

    def enter(k):
        try:
            start.wait()
            for i in range(40):
                name = f"c{(i + k) % 40:03}"
                seen.append((name, tuple(sorted(os.listdir(mnt / name)))))
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=enter, args=(k % 2,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert set(c for _, c in seen) == {tuple(SHOWN)}
    assert opened(mnt) == 40
    assert {n: attrs(mnt / n) for n in before} == before


def test_container_failing_its_open_shows_its_failed_view_when_entered(tmp_path, mount):
    """A container that passes the header check but fails its full open is
    a plain directory to stat, and when entered holds only .shardfs/, whose
    verify says why; the failure is logged once."""
    src = tmp_path / "src"
    src.mkdir()
    data = bytearray(TET.read_bytes())
    index_off = int.from_bytes(data[16:24], "little")
    data[index_off:index_off + 4] = b"XXXX"  # the chunk index's magic
    (src / "late.tet").write_bytes(bytes(data))
    shutil.copy(TET, src / "good.tet")
    mnt = mount(src)
    before = attrs(mnt / "late")
    assert before[1:] == expected(src / "late.tet")
    assert opened(mnt) == 0 and mount_stats(mnt)["containers_failed"] == 0
    assert os.listdir(mnt / "late") == []
    verify = (mnt / "late" / ".shardfs" / "verify").read_text()
    assert verify.startswith("status: failed\n") and "chunk index" in verify, verify
    assert mount_stats(mnt)["containers_failed"] == 1
    assert attrs(mnt / "late") == before
    for _ in range(3):
        os.listdir(mnt / "late")
    errors = (mnt / ".shardfs" / "errors").read_text().splitlines()
    assert len(errors) == 1 and "late.tet" in errors[0] and "chunk index" in errors[0], errors


def test_a_view_reading_other_files_opens_at_lookup(tmp_path, mount):
    """taridx: its view's permissions narrow by its tar shards, known once
    opened: a stat opens it, and it shows the same when entered."""
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "taridx" / "small", src)
    shutil.copy(TET, src / "t.tet")
    mnt = mount(src)
    before = attrs(mnt / "train")
    assert stat.S_ISDIR(before[1]) and opened(mnt) == 1
    assert attrs(mnt / "t") and opened(mnt) == 1
    assert os.listdir(mnt / "train") and opened(mnt) == 1
    assert attrs(mnt / "train") == before


def test_replaced_before_entered(tmp_path, mount):
    """A container replaced between the stat of its view and its entry: the
    old version is gone, so the kernel is told to look the name up again
    (ESTALE) and enters the new version, never the new content under the
    old attributes."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(TET, src / "t.tet")
    mnt = mount(src)
    old = attrs(mnt / "t")
    new = src / "new.tet"
    shutil.copy(TET, new)
    os.utime(new, ns=(10**18, 10**18))
    os.replace(new, src / "t.tet")
    assert sorted(os.listdir(mnt / "t")) == SHOWN
    now = attrs(mnt / "t")
    assert now[0] != old[0] and now[6] == 10**18
    assert opened(mnt) == 1
