"""The decode budget against decompression bombs (issue 15): with
`--cache-size B` the daemon's peak resident memory (VmHWM) stays under
B + 64 MiB above what it needed before reading, whatever a part claims to
decode to, with four readers at once. A part larger than B is refused with
EIO and a logged reason naming --cache-size, without being decoded; a part
within B is decoded once for a whole sequential read, also when it is as
large as a big budget allows."""
import errno
import json
import os
import struct
import sys
import threading

import numpy as np
import zstandard

from conftest import WRITERS, mount_stats, read_through

sys.path.insert(0, str(WRITERS))
import tatami_writer as tatw  # noqa: E402
import tet_writer as tetw  # noqa: E402

MiB = 1 << 20
SLACK = 64 * MiB


def write_tiles(path, frames, tile):
    """A .tet holding one 1-D uint8 dataset "a" of len(frames) tiles of
    `tile` bytes, tile k stored as the zstd frame frames[k] (docs/specs/tet.md)."""
    n = len(frames)
    rec = tetw.record(tetw.Dataset(b"a", np.broadcast_to(np.uint8(0), (n * tile,)), (tile,)))
    index_off = 40 + len(rec)
    pos = index_off + 32 + 104 * n
    out = b"TETR" + struct.pack("<IIIQQ", 1, 1, 0, index_off, 32 + 104 * n)
    out += struct.pack("<Q", len(rec)) + rec
    out += b"TIDX" + struct.pack("<IQHHIQ", 1, n, 0, 0, 0, 0)
    for k, f in enumerate(frames):
        out += struct.pack("<Q8QQQQII", 0, k, 0, 0, 0, 0, 0, 0, 0, pos, tile, len(f), 1, 0)
        pos += len(f)
    path.write_bytes(out + b"".join(frames))


def pattern(k, start, n):
    """Bytes [start, start+n) of tile k: byte i is (i + 7k) mod 251."""
    s = (start + 7 * k) % 251
    period = bytes((s + j) % 251 for j in range(251))
    return (period * (n // 251 + 1))[:n]


def pattern_frame(k, tile):
    return zstandard.ZstdCompressor(level=1).compress(pattern(k, 0, tile))


def zero_frame(size):
    """A zstd frame of `size` zero bytes that does not say its size."""
    c = zstandard.ZstdCompressor(level=1).compressobj()
    block = bytes(MiB)
    return b"".join(c.compress(block) for _ in range(size // MiB)) + c.flush()


def rle_frame(size, window_log):
    """A zstd frame of `size` bytes of 'x' in RLE blocks of 128 KiB that
    declares a window of 2**window_log bytes (RFC 8878 §3.1.1)."""
    blocks = []
    for at in range(0, size, 128 << 10):
        n = min(128 << 10, size - at)
        h = int(at + n == size) | 1 << 1 | n << 3
        blocks.append(h.to_bytes(3, "little") + b"x")
    return struct.pack("<I", 0xFD2FB528) + bytes([0, (window_log - 10) << 3]) + b"".join(blocks)


def proc_status(pid, field):
    """A size /proc/PID/status gives in kB (VmHWM, RssAnon...), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no " + field)


def vm_hwm(pid):
    return proc_status(pid, "VmHWM")


def decoded(mnt):
    return mount_stats(mnt)["cache"]["parts_decoded"]


def read_errno(path, size, off):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        os.pread(fd, size, off)
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def in_threads(fn, n):
    problems = []

    def run(k):
        try:
            fn(k)
        except Exception as e:  # reported below, with the reader's number
            problems.append((k, repr(e)))
    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in ts), "a reader hangs"
    assert not problems, problems


def test_bomb_tiles_are_refused(mount, tmp_path):
    """The issue's reproducer: four zstd tiles of 512 MiB each in a file of
    some 66 KB, read by four readers in 128 KiB pieces with --cache-size 64M."""
    tile = 512 * MiB
    frame = zero_frame(tile)
    src = tmp_path / "src"
    src.mkdir()
    write_tiles(src / "bomb.tet", [frame] * 4, tile)
    assert (src / "bomb.tet").stat().st_size < 100_000
    mnt = mount(src, "--cache-size", "64M")
    pid = mount.last.proc.pid
    view = mnt / "bomb"
    assert json.loads((view / "a" / ".zarray").read_text())["chunks"] == [tile]
    base, before = vm_hwm(pid), decoded(mnt)

    def reader(k):
        for path in (view / "a" / str(k), view / ".shardfs" / "tiles" / "a" / str(k),
                     view / "a.npy"):
            for off in range(0, 2 * MiB, 128 << 10):
                assert read_errno(path, 128 << 10, k * tile + off if path.name == "a.npy"
                                  else off) == errno.EIO, (path, off)
        # the stored bytes themselves are served as they are
        assert read_through(view / ".shardfs" / "tiles" / "a" / f"{k}.zst") == frame
    in_threads(reader, 4)

    peak = vm_hwm(pid)
    assert peak - base < 64 * MiB + SLACK, (base, peak)
    assert decoded(mnt) == before, "a refused part was decoded"
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "--cache-size" in errors and str(tile) in errors, errors


def test_bomb_page_inside_a_part_is_refused(mount, tmp_path, monkeypatch):
    """A tatami column of 8 rows whose one zstd page decodes to 512 MiB: the
    page is decoded while making the column's part, whose own size (32
    bytes) is no bomb; before, each of four readers decoded the page and
    the values read as zeros."""
    bomb = zero_frame(512 * MiB)
    plain = tatw.record

    class Claim(bytes):
        def __len__(self):
            return 512 * MiB

    def record(kind, enc, codec, flags, nvals, raw, stored, *rest):
        if codec == tatw.ZSTD:
            raw, stored = Claim(), bomb
        return plain(kind, enc, codec, flags, nvals, raw, stored, *rest)
    monkeypatch.setattr(tatw, "record", record)
    src = tmp_path / "src"
    src.mkdir()
    tatw.write_file(src / "bomb.tatami",
                    [dict(name="v", type="int32", values=list(range(8)), codecs=[tatw.ZSTD])], [8], 8)
    mnt = mount(src, "--cache-size", "64M")
    pid = mount.last.proc.pid
    path = mnt / "bomb" / "columns" / "v" / "values.bin"
    assert os.stat(path).st_size == 32
    base = vm_hwm(pid)

    def reader(k):
        for _ in range(3):
            assert read_errno(path, 128 << 10, 0) == errno.EIO, k
    in_threads(reader, 4)
    peak = vm_hwm(pid)
    assert peak - base < 64 * MiB + SLACK, (base, peak)
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "page 0: record decodes to %d bytes, more than --cache-size" % (512 * MiB) in errors


def test_verify_of_a_bomb_stays_in_budget(mount, tmp_path):
    """`.shardfs/verify` checks zstd tiles by streaming them, but libzstd
    keeps the window a frame declares: a 512 MiB tile declaring a 2 GiB
    window is not checked under --cache-size 64M (said in the report), and
    a 32 MiB one with the same window is checked by decoding it whole."""
    src = tmp_path / "src"
    src.mkdir()
    write_tiles(src / "bomb.tet", [rle_frame(512 * MiB, 31)] * 2, 512 * MiB)
    write_tiles(src / "fine.tet", [rle_frame(32 * MiB, 31)], 32 * MiB)
    mnt = mount(src, "--cache-size", "64M")
    pid = mount.last.proc.pid
    assert json.loads((mnt / "bomb" / "a" / ".zarray").read_text())
    base = vm_hwm(pid)
    reports = []
    in_threads(lambda k: reports.append((mnt / "bomb" / ".shardfs" / "verify").read_text()), 4)
    assert all(r.startswith("status: failed\n") and "not checked" in r and "--cache-size" in r
               for r in reports), reports
    fine = (mnt / "fine" / ".shardfs" / "verify").read_text()
    assert fine.startswith("status: ok\n"), fine
    assert read_through(mnt / "fine" / "a" / "0", MiB) == b"x" * (32 * MiB)
    peak = vm_hwm(pid)
    assert peak - base < 64 * MiB + SLACK, (base, peak)


def test_four_readers_stay_in_budget(mount, tmp_path):
    """Four readers of four different 40 MiB tiles with --cache-size 64M:
    one fits at a time, so decodes take turns instead of piling up (before,
    four decodes at once and a full cache took some 200 MiB); every byte is
    right. Alone, a reader's sequential 128 KiB reads decode its tile once."""
    tile = 40 * MiB
    src = tmp_path / "src"
    src.mkdir()
    write_tiles(src / "t.tet", [pattern_frame(k, tile) for k in range(5)], tile)
    mnt = mount(src, "--cache-size", "64M")
    pid = mount.last.proc.pid
    view = mnt / "t"
    assert os.stat(view / "a" / "0").st_size == tile
    base = vm_hwm(pid)

    def reader(k):
        fd = os.open(view / "a" / str(k), os.O_RDONLY | os.O_DIRECT)
        try:
            for off in range(0, 6 * MiB, MiB):
                assert os.pread(fd, MiB, off) == pattern(k, off, MiB), (k, off)
        finally:
            os.close(fd)
    in_threads(reader, 4)
    peak = vm_hwm(pid)
    assert peak - base < 64 * MiB + SLACK, (base, peak)

    before = decoded(mnt)
    fd = os.open(view / "a" / "4", os.O_RDONLY | os.O_DIRECT)
    try:
        for off in range(0, tile, 128 << 10):
            assert os.pread(fd, 128 << 10, off) == pattern(4, off, 128 << 10), off
    finally:
        os.close(fd)
    assert decoded(mnt) - before == 1
    assert (mnt / ".shardfs" / "errors").read_text() == ""


def test_huge_part_needs_a_big_budget(mount, tmp_path):
    """A legitimate 96 MiB tile reads whole with --cache-size 128M (decoded
    once), and is refused, with the option to raise named, under 64M."""
    tile = 96 * MiB
    src = tmp_path / "src"
    src.mkdir()
    write_tiles(src / "huge.tet", [pattern_frame(3, tile)], tile)
    mnt = mount(src, "--cache-size", "128M")
    before = decoded(mnt)
    assert read_through(mnt / "huge" / "a" / "0", MiB) == pattern(3, 0, tile)
    assert decoded(mnt) - before == 1

    small = mount(src, "--cache-size", "64M")
    assert read_errno(small / "huge" / "a" / "0", MiB, 0) == errno.EIO
    errors = (small / ".shardfs" / "errors").read_text()
    assert "huge/a/0" in errors and "--cache-size" in errors, errors
