"""FUSE over io_uring (--io-uring, fs/transport/uring.c): requests come through the
queue of the CPU their caller runs on and are answered right; a mount that
names no transport serves through /dev/fuse even with the kernel's switch
on; with the switch off `auto` serves through /dev/fuse and `on` refuses the
mount in one line; a decode on one CPU does not hold up that CPU's other
requests. These tests turn the kernel's switch on and off themselves (root)
and put it back."""
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import conftest
from conftest import SHARDFS, is_mounted, mount_stats, unmount, uring_switch
from test_request_loop import big_zstd_tet, reads_during_decode

DISABLED = Path("/proc/sys/kernel/io_uring_disabled")


@contextmanager
def on_cpu(cpu):
    """Runs the calling thread on one CPU: its requests go to that queue."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def small_src(path, n=40):
    path.mkdir()
    files = {f"f{i}": os.urandom(1 + i * 997) for i in range(n)}
    for name, data in files.items():
        (path / name).write_bytes(data)
    return files


def read_plain(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def test_each_cpus_requests_come_through_its_queue(tmp_path, mount):
    files = small_src(tmp_path / "src")
    with uring_switch(True):
        mnt = mount(tmp_path / "src", "--io-uring", "on")
        os.stat(mnt)  # INIT done and the queues registered
    # the switch is back off: a connection keeps the transport it got
    cpus = sorted(os.sched_getaffinity(0))[:2]
    for i, cpu in enumerate(cpus):
        # files not read yet: each needs a LOOKUP and a READ
        names = sorted(files)[i::len(cpus)]
        before = mount_stats(mnt)
        assert before["transport"] == "io_uring"
        with on_cpu(cpu):
            for name in names:
                assert read_plain(mnt / name) == files[name]
        after = mount_stats(mnt)
        got = after["queues"][f"cpu{cpu}"] - before["queues"][f"cpu{cpu}"]
        # every LOOKUP and READ of each file (no OPEN: shardfs needs none)
        # (the stats reads themselves run unpinned, on either queue)
        kinds = {k: after["requests"][k] - before["requests"][k] for k in after["requests"]}
        assert got >= 2 * len(names), (cpu, before["queues"], after["queues"], kinds)
        # /dev/fuse carries only INIT, FORGET and INTERRUPT: FORGETs of the
        # stats.json reads' nodes (a node per snapshot, forgotten as the
        # next is looked up), none of a file's requests
        assert after["queues"]["dev_fuse"] - before["queues"]["dev_fuse"] <= 2 + kinds["forget"]
    assert set(after["queues"]) == {"dev_fuse"} | {f"cpu{i}" for i in range(os.cpu_count())}
    assert after["queues"]["dev_fuse"] <= 3 + after["requests"]["forget"]


def test_default_and_each_mode_pick_their_transport(tmp_path, mount, monkeypatch):
    """/dev/fuse by default and with off, whatever the switch says; auto
    follows the switch."""
    files = small_src(tmp_path / "src")
    # the default is the daemon's, even in the run that asks every mount
    # for io_uring (SHARDFS_IO_URING=on)
    monkeypatch.setattr(conftest, "IO_URING", None)
    for switch, mode, want in ((False, "auto", "dev_fuse"), (True, "off", "dev_fuse"),
                               (True, None, "dev_fuse"), (True, "auto", "io_uring")):
        with uring_switch(switch):
            mnt = mount(tmp_path / "src", *(("--io-uring", mode) if mode else ()))
            for name, data in files.items():
                assert read_plain(mnt / name) == data
            s = mount_stats(mnt)
            assert s["transport"] == want, (switch, mode)
            if want == "dev_fuse":
                assert list(s["queues"]) == ["dev_fuse"]
                assert s["queues"]["dev_fuse"] >= 2 * len(files)
            else:
                assert sum(s["queues"].values()) - s["queues"]["dev_fuse"] >= 2 * len(files)


def refused_mount(tmp_path, *args):
    """Runs shardfs --io-uring on, expecting the mount refused: returns its
    one line of stderr."""
    src = tmp_path / "rsrc"
    src.mkdir(exist_ok=True)
    mnt = tmp_path / "rmnt"
    mnt.mkdir(exist_ok=True)
    try:
        r = subprocess.run([str(SHARDFS), str(src), str(mnt), "--io-uring", "on", *args],
                           capture_output=True, text=True, timeout=30)
    finally:
        unmount(mnt)
    assert r.returncode == 1, r
    assert not is_mounted(mnt)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_on_refuses_the_mount_in_one_line_when_the_kernel_does(tmp_path):
    with uring_switch(False):
        line = refused_mount(tmp_path)
    assert "--io-uring on" in line and "enable_uring" in line, line


@contextmanager
def io_uring_disabled():
    old = DISABLED.read_text().strip()
    DISABLED.write_text("2")
    try:
        yield
    finally:
        DISABLED.write_text(old)


def test_no_io_uring_at_all_falls_back_or_refuses(tmp_path, mount):
    """io_uring itself disabled (sysctl kernel.io_uring_disabled=2) while
    FUSE allows it: auto serves through /dev/fuse, on refuses."""
    files = small_src(tmp_path / "src")
    with uring_switch(True), io_uring_disabled():
        line = refused_mount(tmp_path)
        assert "io_uring is not available" in line, line
        mnt = mount(tmp_path / "src", "--io-uring", "auto")
        for name, data in files.items():
            assert read_plain(mnt / name) == data
        assert mount_stats(mnt)["transport"] == "dev_fuse"


def test_a_decode_does_not_hold_up_its_cpus_other_requests(tmp_path, mount):
    """The decode and the small reads all come from one CPU, so one queue:
    the small reads are answered while the chunk decodes."""
    src = tmp_path / "src"
    src.mkdir()
    want = big_zstd_tet(src / "z.tet")
    (src / "small").write_bytes(b"s" * 100)
    with uring_switch(True):
        mnt = mount(src, "--io-uring", "on")
        os.stat(mnt / "z" / "x" / "0.0")
    cpu = min(os.sched_getaffinity(0))
    before = mount_stats(mnt)["queues"][f"cpu{cpu}"]
    answered = reads_during_decode(mnt, want, lambda: on_cpu(cpu))
    # they all went through that CPU's queue
    assert mount_stats(mnt)["queues"][f"cpu{cpu}"] - before >= answered


def test_no_push_at_open_over_io_uring(tmp_path, mount):
    """A store into the page cache could wait for a READ that no entry of
    the queue is left to take, so over io_uring the IOCTL at open pushes
    nothing and the READ brings the bytes."""
    files = small_src(tmp_path / "src")
    with uring_switch(True):
        mnt = mount(tmp_path / "src", "--io-uring", "on")
        before = mount_stats(mnt)
    for name, data in files.items():
        with open(mnt / name, "rb") as f:  # buffered: isatty() sends the IOCTL
            assert f.read() == data
    after = mount_stats(mnt)
    assert after["requests"]["ioctl"] - before["requests"]["ioctl"] == len(files)
    assert after["requests"]["read"] - before["requests"]["read"] >= len(files)
    assert after["bytes_served"]["pushed_at_open"] == 0
