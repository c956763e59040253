"""Mounting the filesystems under test (shardfs and the reference FUSE
filesystems), always taken down again."""
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

# the kernel's switch for FUSE over io_uring, as the mounted tests set it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from conftest import URING_SWITCH, uring_switch  # noqa: E402,F401


def is_mounted(mnt):
    mnt = os.path.realpath(mnt)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def unmount(mnt):
    for args in (["fusermount3", "-u"], ["fusermount3", "-uz"]):
        if not is_mounted(mnt):
            return
        subprocess.run(args + [str(mnt)], capture_output=True, timeout=60)


@contextmanager
def mounted(cmd, mnt_base=None):
    """Runs `cmd(mnt)` (a list) in the foreground, waits for the mount, yields
    (mnt, process, seconds until mounted), and unmounts at the end."""
    base = Path(tempfile.mkdtemp(prefix="shardfs-bench-", dir=mnt_base))
    mnt = base / "mnt"
    mnt.mkdir()
    log = open(base / "stderr", "w+b")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd(mnt), stdout=subprocess.DEVNULL, stderr=log)
    try:
        while not is_mounted(mnt):
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"{cmd(mnt)[0]} exited {proc.returncode}: "
                                   f"{log.read().decode(errors='replace')}")
            if time.perf_counter() - t0 > 60:
                raise RuntimeError(f"{cmd(mnt)[0]} did not mount within 60 s")
            time.sleep(0.001)
        yield mnt, proc, time.perf_counter() - t0
    finally:
        unmount(mnt)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.rmdir(mnt)
        os.unlink(base / "stderr")
        os.rmdir(base)


def shardfs(binary, src, *args):
    # The groups that mount with --io-uring on turn the kernel's switch on
    # for their length (uring_switch); another user's run on the machine
    # that ends meanwhile puts back the value it found, so the switch is
    # set again for each such mount.
    if "--io-uring" in args and args[args.index("--io-uring") + 1] == "on" and \
            URING_SWITCH.read_text().strip() != "Y":
        URING_SWITCH.write_text("Y")
    return mounted(lambda mnt: [str(binary), str(src), str(mnt), "-f", *args])


def squashfuse_ll(image):
    return mounted(lambda mnt: ["squashfuse_ll", "-f", str(image), str(mnt)])


def archivemount(tar):
    return mounted(lambda mnt: ["archivemount", "-f", "-o", "readonly", str(tar), str(mnt)])


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")
