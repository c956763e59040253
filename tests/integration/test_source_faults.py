"""Sources that fail under the mount (docs/design.md §4): a container
truncated, extended or rewritten in place while handles into its view are
open. Every read of such a handle gives bytes or EIO/ESTALE/ENOENT, never
ENOTCONN (a dead daemon) and never a hang; bytes past a file's new end are
never served as zeros; the daemon goes on serving an intact copy of the same
container exactly, and new opens see the new version."""
import errno
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from relutil import FORMATS, TimedReader, read_tree, within, writer_sample

ALLOWED = (errno.EIO, errno.ESTALE, errno.ENOENT)


def drop_caches():
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def sample_copy(fmt, cache_dir, dst):
    shutil.copytree(writer_sample(fmt, cache_dir), dst,
                    ignore=shutil.ignore_patterns("*.expect.json"))
    return dst


# containers of many pages: a quarter of them cuts through stored parts
LARGER = {"tsumugi": "tsumugi/gold_prod.tsumugi", "tatami": "tatami/g02_blob.tatami",
          "tet": "tet/large.tet"}


def container_copy(fmt, cache_dir, dst):
    """A container of `fmt` in dst: an upstream-written fixture of several
    pages, or the writer's sample (taridx, Shardlake)."""
    if fmt not in LARGER:
        return sample_copy(fmt, cache_dir, dst)
    dst.mkdir(parents=True)
    shutil.copy(FIXTURES / LARGER[fmt], dst)
    return dst


def source_files(root):
    """The files a container of any format consists of (taridx: the index
    and its tar shards; Shardlake: the .sidx shards)."""
    suffixes = (".tsumugi", ".tatami", ".tet", ".sidx", ".taridx", ".tar")
    return sorted(p for p in Path(root).rglob("*") if p.is_file() and p.suffix in suffixes)


def view_files(root):
    """Every regular file under root, each view's .shardfs/ included."""
    out, stack = [], [Path(root)]
    while stack:
        d = stack.pop()
        names = os.listdir(d)
        if (d / ".shardfs").is_dir():
            names.append(".shardfs")
        for n in names:
            p = d / n
            if p.is_symlink():
                continue
            (stack.append if p.is_dir() else out.append)(p)
    return sorted(out)


def read_fd(fd, cap=64 << 20):
    """All bytes of an open handle, or the errno of the failure; a read that
    does not finish within 20 s fails the test."""

    def work():
        parts, off = [], 0
        while off < cap and (b := os.pread(fd, 1 << 20, off)):
            parts.append(b)
            off += len(b)
        return b"".join(parts)

    return within(20, "read", work)


def fresh_read(path):
    """The bytes of path read through a new handle, or the errno."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def open_all(paths):
    return {p: os.open(p, os.O_RDONLY) for p in paths}


def close_all(fds):
    for fd in fds.values():
        os.close(fd)


def cut_under_handles(files, sources):
    """Opens every file, drops the page cache, truncates each source file in
    place to a quarter, then reads every handle: {file: bytes or errno}."""
    fds = open_all(files)
    try:
        drop_caches()
        for c in sources:
            os.truncate(c, c.stat().st_size // 4)
        return {p: read_fd(fd) for p, fd in fds.items()}
    finally:
        close_all(fds)


def errors_text(mnt):
    return (Path(mnt) / ".shardfs" / "errors").read_text(errors="replace")


@pytest.mark.parametrize("fmt", FORMATS)
def test_truncated_to_a_quarter(fmt, tmp_path, tmp_path_factory, mount):
    cache_dir = tmp_path_factory.getbasetemp()
    src = tmp_path / "src"
    container_copy(fmt, cache_dir, src / "hit")
    container_copy(fmt, cache_dir, src / "intact")
    mnt = mount(src)
    reader = TimedReader()
    before = read_tree(mnt / "intact", reader)
    assert any(isinstance(v, bytes) and v for v in before.values())

    files = view_files(mnt / "hit")
    assert any(".shardfs" in p.parts for p in files)
    got = cut_under_handles(files, source_files(src / "hit"))
    bad = {str(p): errno.errorcode.get(v, v) for p, v in got.items()
           if not isinstance(v, bytes) and v not in ALLOWED}
    assert not bad, bad
    assert any(v == errno.EIO for v in got.values()), "nothing noticed the truncation"
    assert mount.last.proc.poll() is None, "the daemon died"

    drop_caches()
    after = read_tree(mnt / "intact", reader)
    assert after == before
    assert "changed in place" in errors_text(mnt)


def test_zeros_past_a_new_end_are_not_served(tmp_path, tmp_path_factory, mount):
    """A Shardlake shard cut by a few bytes, inside its last page: codes.npy
    (zero-copy from the shard) fails instead of ending in zeros, and so does
    the shard itself read through SRC."""
    src = sample_copy("shardlake", tmp_path_factory.getbasetemp(), tmp_path / "src")
    mnt = mount(src)
    codes = sorted(mnt.rglob("codes.npy"))
    assert codes, "the sample has no PQ shard"
    view = codes[0].parent
    shard = src / view.relative_to(mnt).parent / (view.name + ".sidx")
    whole = fresh_read(codes[0])
    assert isinstance(whole, bytes) and len(whole) > 16
    through_src = mnt / shard.relative_to(src)
    assert fresh_read(through_src) == shard.read_bytes()
    fds = open_all([codes[0], through_src])
    try:
        drop_caches()
        size = shard.stat().st_size
        assert size % 4096 > 8 or size % 4096 == 0
        os.truncate(shard, size - 3)
        for p, fd in fds.items():
            assert read_fd(fd) in (errno.EIO, errno.ESTALE), p
    finally:
        close_all(fds)
    assert mount.last.proc.poll() is None


def wait_for(fn, secs=5):
    deadline = time.monotonic() + secs
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


def test_appended_in_place(tmp_path, tmp_path_factory, mount):
    """A tar shard of a fold appended to in place (its members stay where
    they were): handles opened before fail with EIO; opens after the change
    read the members exactly, from a new view."""
    src = sample_copy("taridx", tmp_path_factory.getbasetemp(), tmp_path / "src")
    mnt = mount(src)
    files = [p for p in view_files(mnt / "demo") if ".shardfs" not in p.parts]
    want = {p: fresh_read(p) for p in files}
    assert all(isinstance(v, bytes) for v in want.values())
    fds = open_all(files)
    try:
        drop_caches()
        for t in sorted(src.glob("demo_*.tar")):
            with open(t, "ab") as f:
                f.write(b"\0" * 10240)
        got = {p: read_fd(fd) for p, fd in fds.items()}
    finally:
        close_all(fds)
    assert all(v == errno.EIO for v in got.values())
    # the new version is seen as soon as the change is (inotify; else the
    # one-second entry timeout)
    assert wait_for(lambda: all(fresh_read(p) == want[p] for p in files))
    assert mount.last.proc.poll() is None


def test_overwritten_in_place(tmp_path, mount):
    """A plain file rewritten in place with other bytes of the same size, and
    a tet file rewritten in place (same bytes, a new mtime): a handle opened
    before reads the old version's bytes or EIO, never a mix; new opens
    read the new version exactly."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copyfile(FIXTURES / "tet" / "multichunk_u8.tet", src / "w.tet")
    old_blob, new_blob = os.urandom(300_000), os.urandom(300_000)
    (src / "blob.bin").write_bytes(old_blob)
    mnt = mount(src)
    files = [p for p in view_files(mnt / "w") if ".shardfs" not in p.parts]
    want = {p: fresh_read(p) for p in files}
    assert fresh_read(mnt / "blob.bin") == old_blob
    fds = open_all(files + [mnt / "blob.bin"])
    try:
        drop_caches()
        with open(src / "blob.bin", "r+b") as f:
            f.write(new_blob)
        tet = (src / "w.tet").read_bytes()
        with open(src / "w.tet", "r+b") as f:
            f.write(tet)
            later = time.time_ns() + 10**9
            os.utime(f.fileno(), ns=(later, later))
        got = {p: read_fd(fd) for p, fd in fds.items()}
    finally:
        close_all(fds)
    # never a mix: the old version's bytes (a file made when the view was
    # built, .zarray and the like) or EIO; the stored data always fails
    assert got.pop(mnt / "blob.bin") == errno.EIO
    assert all(v == errno.EIO or v == want[p] for p, v in got.items())
    assert all(got[p] == errno.EIO for p in files if p.name[0].isdigit())
    assert wait_for(lambda: fresh_read(mnt / "blob.bin") == new_blob)
    assert wait_for(lambda: all(fresh_read(p) == want[p] for p in files))
    assert mount.last.proc.poll() is None


def test_meta_root_lists_its_files(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    mnt = mount(src)
    assert sorted(os.listdir(mnt / ".shardfs")) == ["errors", "stats.json"]
    assert all(e.is_file() for e in os.scandir(mnt / ".shardfs"))
    assert ".shardfs" not in os.listdir(mnt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_storage_failing_under_the_mapping(fmt, tmp_path, tmp_path_factory, mount):
    """Mapped pages that fail to read while the file still looks whole (a
    network filesystem losing its server): the source is another shardfs
    mount whose own source is truncated, so its old inode keeps its size
    while its reads fail with EIO. Reading those pages inside our decoders
    raises SIGBUS; every read fails with EIO, the daemon lives on and serves
    an intact copy exactly."""
    cache_dir = tmp_path_factory.getbasetemp()
    lower = tmp_path / "lower"
    container_copy(fmt, cache_dir, lower / "hit")
    container_copy(fmt, cache_dir, lower / "intact")
    inner = mount(lower)
    inner_daemon = mount.last
    mnt = mount(inner)
    outer = mount.last
    try:
        reader = TimedReader()
        before = read_tree(mnt / "intact", reader)
        got = cut_under_handles(view_files(mnt / "hit"), source_files(lower / "hit"))
        assert outer.proc.poll() is None and inner_daemon.proc.poll() is None
        # bytes only of the version opened: the intact copy's (info files
        # name their container)
        old = {mnt / "hit" / p.relative_to(mnt / "intact"): v for p, v in before.items()}
        bad = {str(p): errno.errorcode.get(v, v) if isinstance(v, int) else "other bytes"
               for p, v in got.items()
               if v not in ALLOWED and v.replace(b"hit/", b"intact/") != old[p]}
        assert not bad, bad
        # pages our code read at open stay mapped, and read fine: only
        # those it had not read fault
        if errno.EIO in got.values():
            assert "truncated or its storage fails" in errors_text(mnt)
        drop_caches()
        assert read_tree(mnt / "intact", reader) == before
    finally:
        # the outer daemon first: it holds the inner mount open
        assert outer.stop() == 0
