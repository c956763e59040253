"""Memory a view and its decoders hold in plain use (issue 39, point 2):
the daemon's peak resident memory (VmHWM, above what it held before, as
test_cache_budget.py measures it, so that ASan's own shadow does not count)
stays under --cache-size + SLACK, the constant docs/options.md states.

- A tatami blob column of a million rows, listed twice and sampled: its
  directory holds no node per row (about 250 bytes each before, some
  250 MiB here), and a second listing costs nothing more than the first.
- `.shardfs/verify` of a 16 KB tile whose zstd frame declares a 2^28
  window, from eight threads: the window is bounded by the tile's recorded
  size (each thread allocated and kept 256 MiB before).
- Sparse tar members of 65,536 pieces: their extents are charged to the
  budget (they were held outside it, as long as the kernel kept the file)."""
import errno
import os
import sys
import tarfile

from conftest import WRITERS, mount_stats, read_through
from test_cache_budget import in_threads, proc_status, read_errno, rle_frame, vm_hwm, write_tiles

sys.path.insert(0, str(WRITERS))
import tatami_writer as tatw  # noqa: E402
from sparse_tar import PIECES, add_sparse  # noqa: E402

MiB = 1 << 20
SLACK = 48 * MiB
ROWS = 1_000_000
GROUP = 1 << 18


def blob(i):
    return b"%x" % i


def present(i):
    """Rows of the last group have nulls, the others none: both kinds of
    row group are numbered."""
    return i < 3 * GROUP or i % 7 != 3


def test_million_row_blob_column_lists_in_budget(mount, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    cols = [dict(name="doc", type="blobref", flags=1 | 4,
                 values=[blob(i) if present(i) else None for i in range(ROWS)])]
    groups = [min(GROUP, ROWS - s) for s in range(0, ROWS, GROUP)]
    tatw.write_file(src / "big.tatami", cols, groups, 1 << 16,
                    blob_cfg={"doc": {"run_values": 4096}})
    mnt = mount(src, "--cache-size", "16M")
    pid = mount.last.proc.pid
    d = mnt / "big" / "blobs" / "doc"
    assert (mnt / "big" / "blobs").is_dir()
    base = vm_hwm(pid)
    want = [str(i) for i in range(ROWS) if present(i)]
    assert os.listdir(d) == want
    first = vm_hwm(pid)
    assert first - base < 16 * MiB + SLACK, (base, first)
    # stats.json says what the charge holds: the last group's table of
    # present rows, 4 bytes a row
    kinds = mount_stats(mnt)["cache"]["charged"]
    assert kinds["directory_tables"] >= 4 * (ROWS - 3 * GROUP) * 6 // 7, kinds
    assert os.listdir(d) == want
    second = vm_hwm(pid)
    assert second - first < 8 * MiB, (first, second)
    # a sample of the files, and names that are no row of the column
    for i in range(0, ROWS, 997):
        p = d / str(i)
        if present(i):
            assert read_through(p) == blob(i), i
        else:
            assert not p.exists(), i
    for name in ("03", "+3", str(ROWS), "1e3", "18446744073709551616"):
        assert not (d / name).exists(), name
    peak = vm_hwm(pid)
    assert peak - base < 16 * MiB + SLACK, (base, peak)
    assert mount.last.errors() == ""


def test_verify_window_is_bounded_by_the_tile(mount, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    # 16 KB of RLE blocks that decode to 512 MiB in a frame declaring a
    # 2^28 window, recorded as a tile of 16 KiB (eight files: a report is
    # made once per file); and a fine 1 MiB tile whose frame declares the
    # same window
    for k in range(8):
        write_tiles(src / f"bomb{k}.tet", [rle_frame(512 * MiB, 28)], 16 << 10)
    write_tiles(src / "fine.tet", [rle_frame(MiB, 28)], MiB)
    mnt = mount(src)
    pid = mount.last.proc.pid
    assert all((mnt / f"bomb{k}" / "a").is_dir() for k in range(8))
    assert (mnt / "fine" / "a").is_dir()
    base = vm_hwm(pid)
    reports = []
    in_threads(lambda k: reports.append((mnt / f"bomb{k}" / ".shardfs" / "verify").read_text()), 8)
    assert all(r.startswith("status: failed\n") and "16384" in r
               for r in reports), reports
    fine = (mnt / "fine" / ".shardfs" / "verify").read_text()
    assert fine.startswith("status: ok\n"), fine
    assert read_through(mnt / "fine" / "a" / "0") == b"x" * MiB
    peak = vm_hwm(pid)
    assert peak - base < SLACK, (base, peak)


def sparse_tar(path, seed, pieces=PIECES):
    """A tar of one sparse member named s (add_sparse)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        return add_sparse(t, "s", seed, pieces)


def test_sparse_maps_are_charged(mount, tmp_path):
    """Twelve tars of one sparse member of 65,536 pieces each (6 MiB of
    extents a member, kept while the kernel keeps the file: 12 read at once
    took some 90 MiB outside the budget before), read at once under
    --cache-size 4M: each is refused with the reason logged, since its map
    needs more than the budget holds, and resident memory stays in the
    budget; a member of 8,192 pieces (768 KiB) reads whole."""
    src = tmp_path / "src"
    src.mkdir()
    for k in range(12):
        sparse_tar(src / f"t{k}.tar", k)
    small = sparse_tar(src / "small.tar", 99, 8192)
    mnt = mount(src, "--cache-size", "4M")
    pid = mount.last.proc.pid
    base = vm_hwm(pid)
    got = [None] * 12

    def read(k):
        got[k] = read_errno(mnt / f"t{k}" / "s", 4096, 0)
    in_threads(read, 12)
    assert got == [errno.EIO] * 12, got
    assert "its sparse map needs 6291504 bytes of memory, more than --cache-size" \
        in mount.last.errors()
    with open(mnt / "small" / "s", "rb") as f:
        assert f.read() == small
        # stats.json says what the charge holds while the file is kept
        s = mount_stats(mnt)["cache"]
        assert 8192 * 32 <= s["charged"]["file_extents"] <= s["bytes_charged"], s
    peak = vm_hwm(pid)
    assert peak - base < 4 * MiB + SLACK, (base, peak)


MEMBERS = 20


def pread_direct(path, size, off):
    """Bytes read past the page cache, so that the daemon serves them."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        return os.pread(fd, size, off)
    finally:
        os.close(fd)


def test_idle_sparse_maps_are_dropped(mount, tmp_path):
    """The issue's case at a small scale: one tar of 20 sparse members of
    65,536 pieces (6 MiB of extents each, 120 MiB in all) under
    --cache-size 16M, each opened, read and closed in turn. The kernel keeps
    the files, so before, the extents of the first two members held the
    budget and every later read failed with EIO. The extents of a file no
    read is using are dropped when the budget is short, before a reader
    waits, and made again at the file's next read: every read returns its
    bytes, also with four readers at once, the charges stay within the
    budget and resident memory within --cache-size + SLACK. (Reads are
    4 KiB: a whole member of 65,536 holes reads slowly, a matter of its
    own.)"""
    src = tmp_path / "src"
    src.mkdir()
    with tarfile.open(src / "many.tar", "w", format=tarfile.PAX_FORMAT) as t:
        want = [add_sparse(t, f"m{k}", k) for k in range(MEMBERS)]
    mnt = mount(src, "--cache-size", "16M")
    pid = mount.last.proc.pid
    d = mnt / "many"
    assert sorted(os.listdir(d)) == sorted(f"m{k}" for k in range(MEMBERS))
    base_hwm = vm_hwm(pid)
    base_anon = proc_status(pid, "RssAnon")
    end = 4 * PIECES - 4096
    for k in range(MEMBERS):
        for off in (0, end):
            assert pread_direct(d / f"m{k}", 4096, off) == want[k][off:off + 4096], (k, off)
    # made again on demand, read past the page cache by four readers at
    # once, each in its own order: a drop never frees what a read uses
    mid = 2 * PIECES

    def reader(r):
        for k in range(MEMBERS):
            m = (k * (2 * r + 1) + r) % MEMBERS
            assert pread_direct(d / f"m{m}", 4096, mid) == want[m][mid:mid + 4096], (r, m)
    in_threads(reader, 4)
    s = mount_stats(mnt)["cache"]
    assert 0 < s["charged"]["file_extents"] <= s["bytes_charged"] <= 16 * MiB, s
    assert s["file_extents_dropped"] >= 2 * MEMBERS - 4, s
    assert mount.last.errors() == ""
    peak = vm_hwm(pid)
    anon = proc_status(pid, "RssAnon")
    assert peak - base_hwm < 16 * MiB + SLACK, (base_hwm, peak)
    assert anon - base_anon < 16 * MiB + SLACK, (base_anon, anon)
