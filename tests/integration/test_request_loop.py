"""The daemon's request loop (fs/transport/loop.c): one thread waits for requests and
serves fast ones itself; slow work hands the wait to another thread, and a
watch takes it over from a handler stuck without doing so."""
import contextlib
import os
import subprocess
import sys
import threading
import time

import numpy as np

from conftest import WRITERS, mount_stats, read_through

sys.path.insert(0, str(WRITERS))
import taridx_writer as xw  # noqa: E402
import tet_writer as tw  # noqa: E402


def big_zstd_tet(path):
    """One zstd chunk of 64 MiB: a decode that takes a while."""
    rng = np.random.default_rng(3)
    a = np.cumsum(rng.standard_normal((4096, 4096), dtype=np.float32), axis=1)
    a = (np.round(a * 16) / 16).astype("<f4")
    tw.write_tet(str(path), [tw.Dataset(b"x", a, a.shape, codec="zstd")])
    return a.tobytes()


def reads_during_decode(mnt, want, pin=contextlib.nullcontext):
    """Reads the first MiB of z/x/0.0 (a long decode) in a thread while
    reading `small` again and again, both under `pin()` (one CPU, say);
    checks the bytes and that several small reads were answered meanwhile.
    Returns how many were."""
    done = threading.Event()
    got = {}

    def big():
        with pin(), open(mnt / "z" / "x" / "0.0", "rb", buffering=0) as f:
            got["big"] = f.read(1 << 20)
        done.set()

    t = threading.Thread(target=big)
    answered = 0
    with pin():
        t.start()
        while not done.is_set():
            fd = os.open(mnt / "small", os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            assert os.read(fd, 200) == b"s" * 100
            os.close(fd)
            answered += 1
    t.join()
    assert got["big"] == want[: 1 << 20]
    assert answered >= 3, f"only {answered} reads were answered during the decode"
    return answered


def test_a_slow_decode_does_not_hold_up_other_requests(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    want = big_zstd_tet(src / "z.tet")
    (src / "small").write_bytes(b"s" * 100)
    mnt = mount(src)
    os.stat(mnt / "z" / "x" / "0.0")
    # requests made while the chunk decodes are answered meanwhile
    reads_during_decode(mnt, want)


def test_a_store_waiting_for_a_queued_read_is_rescued(tmp_path, mount):
    """Two readers open the same small files at once: one with Python's
    buffered open (an IOCTL, so the daemon stores the content while the
    page may be locked by the other's READ, queued behind the store), one
    with plain reads. Every read completes with the right bytes."""
    src = tmp_path / "src"
    src.mkdir()
    files = {f"f{i:04}": os.urandom(1 + i * 37 % 60000) for i in range(600)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    mnt = mount(src)
    names = sorted(files)
    for name in names:
        os.stat(mnt / name)
    bad = []
    start = threading.Barrier(2)

    def buffered():
        start.wait()
        for name in names:
            if read_through(mnt / name) != files[name]:
                bad.append(name)

    def plain():
        start.wait()
        for name in names:
            fd = os.open(mnt / name, os.O_RDONLY)
            b = os.read(fd, 1 << 20)
            os.close(fd)
            if b != files[name]:
                bad.append(name)

    threads = [threading.Thread(target=buffered), threading.Thread(target=plain)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a reader hung"
    assert not bad, bad[:10]
    assert time.monotonic() - t0 < 60


def test_spin_off_and_one_thread_serve_the_same_bytes(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    data = {f"f{i}": os.urandom(i * 1000 + 1) for i in range(50)}
    for name, b in data.items():
        (src / name).write_bytes(b)
    for args in (["--spin-us", "0"], ["--threads", "1"], ["--threads", "1", "--spin-us", "0"]):
        mnt = mount(src, *args)
        for name, b in data.items():
            assert read_through(mnt / name) == b, (args, name)


def test_no_polling_while_no_cpu_is_spare(tmp_path, mount):
    """With a CPU-bound process per CPU, the waiting thread stops polling
    /dev/fuse and sleeps at once: a thread that polls is not woken ahead of
    the process holding its CPU, so a request would wait out that process's
    time slice. stats.json counts those waits; the bytes read meanwhile are
    the files'."""
    src = tmp_path / "src"
    src.mkdir()
    data = {f"f{i}": os.urandom(i * 100 + 1) for i in range(20)}
    for name, b in data.items():
        (src / name).write_bytes(b)
    mnt = mount(src, "--io-uring", "off")
    before = mount_stats(mnt)["polls_skipped"]
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(os.cpu_count())]
    try:
        for name, b in data.items():
            time.sleep(0.003)  # each read waits anew
            assert read_through(mnt / name) == b, name
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert mount_stats(mnt)["polls_skipped"] > before



def test_fold_members_and_decoded_tiles_are_pushed_at_open(tmp_path, mount):
    """View files get the push too: fold members straight from their tar,
    zstd tiles decoded (once) for it."""
    src = tmp_path / "src"
    src.mkdir()
    n = 300
    xw.write_scale(src, n, per_shard=100)
    a = np.arange(64 * 64, dtype="<f4").reshape(64, 64)
    tw.write_tet(str(src / "t.tet"), [tw.Dataset(b"x", a, (32, 32), codec="zstd")])
    mnt = mount(src, "--io-uring", "off")  # over io_uring no push is made
    members = ["%08d.txt" % i for i in range(0, n, 7)]
    tiles = ["0.0", "0.1", "1.0", "1.1"]
    for m in members:
        os.stat(mnt / "big" / m)
    for t in tiles:
        os.stat(mnt / "t" / "x" / t)
    before = mount_stats(mnt)
    for m in members:
        assert read_through(mnt / "big" / m) == xw.scale_payload(int(m[:8]))
    for t in tiles:
        i, j = map(int, t.split("."))
        assert read_through(mnt / "t" / "x" / t) == a[i * 32:(i + 1) * 32, j * 32:(j + 1) * 32].tobytes()
    after = mount_stats(mnt)
    pushed = after["bytes_served"]["pushed_at_open"] - before["bytes_served"]["pushed_at_open"]
    assert pushed == sum(len(xw.scale_payload(int(m[:8]))) for m in members) + 4 * 32 * 32 * 4
    # no READ but the stats read of `before`
    assert after["requests"]["read"] - before["requests"]["read"] == 1
    assert after["cache"]["parts_decoded"] - before["cache"]["parts_decoded"] == 4
