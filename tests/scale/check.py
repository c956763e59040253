#!/usr/bin/python3
"""CI-sized checks of issue 19: what the daemon keeps per member and per
container, measured on a release build, so that a regression fails the
build rather than a benchmark nobody runs (the full-size cases are in
tests/bench/run.py --only scale).

    /usr/bin/python3 tests/scale/check.py BUILD_DIR RESULTS.json [--members N]

Each check is one JSON line in RESULTS.json in meson's test log form
({"name": ..., "result": "OK" | "FAIL"}), read by tests/summarize.py; a
line per check is also printed with its figure and its limit. Memory is
the daemon's resident set from /proc/PID/status, above what it held right
after mounting: all of it (anonymous and mapped pages) for the peaks per
member, its anonymous memory (RssAnon) where a limit is a few MiB and file
pages or a request thread first taking work would be noise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "bench"))
import data  # noqa: E402
import mounts  # noqa: E402


def kib(pid, field):
    return mounts.rss_kib(pid, field)


class AnonPeak:
    """The peak of the daemon's anonymous resident memory (RssAnon: its
    heaps, stacks and buffers, not the page cache its mappings show),
    sampled every 10 ms while the block runs: what a memory limit here
    means. VmHWM also counts file pages the kernel keeps mapped or
    reclaims as it likes, which vary from run to run with the machine's
    load."""

    def __init__(self, pid):
        self.pid, self.peak = pid, kib(pid, "RssAnon")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self):
        while not self.stop.wait(0.01):
            self.peak = max(self.peak, kib(self.pid, "RssAnon"))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, kib(self.pid, "RssAnon"))


def settle_threads(mnt, seconds=1.0, readers=8):
    """Lookups from several threads at once for a while, so that every
    request thread of the daemon has taken requests (its stack and malloc
    arena touched) before a baseline is taken: otherwise a thread that
    first takes work later, as a busy machine makes happen, counts as
    growth."""
    end = time.monotonic() + seconds

    def loop():
        while time.monotonic() < end:
            os.stat(mnt / ".shardfs" / "stats.json")

    threads = [threading.Thread(target=loop) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def drop_kernel_entries():
    """Makes the kernel forget the dentries and inodes it holds (FORGETs)."""
    subprocess.run(["sync"])
    Path("/proc/sys/vm/drop_caches").write_text("2")
    time.sleep(2)


class Checks:
    def __init__(self, out):
        self.out = out
        self.failed = 0

    def add(self, name, figure, limit, unit):
        ok = figure <= limit
        self.failed += not ok
        print(f"{name:<34} {figure:10.1f} {unit:<22} limit {limit:g} {'ok' if ok else 'FAILED'}",
              flush=True)
        with open(self.out, "a") as f:
            f.write(json.dumps({"name": f"scale {name}", "result": "OK" if ok else "FAIL",
                                "figure": figure, "limit": limit, "unit": unit}) + "\n")

    def error(self, name, why):
        self.failed += 1
        print(f"{name}: FAILED: {why}", flush=True)
        with open(self.out, "a") as f:
            f.write(json.dumps({"name": f"scale {name}", "result": "FAIL", "why": why}) + "\n")


def find_members(c, build, src, view, n, what, forget_limit):
    """find of the n members of MNT/view: peak memory per member (150
    bytes: the 1,000,000-member target of 150 MiB), and after the kernel
    forgets what it looked up, what is left per member (forget_limit)."""
    with mounts.shardfs(build / "fs" / "shardfs", src) as (mnt, proc, _):
        os.stat(mnt / ".shardfs")
        # every request thread's stack and arena in the baseline: a thread
        # first taking work during the find is no memory per member
        settle_threads(mnt)
        base = kib(proc.pid, "VmRSS")
        out = subprocess.run(f"find '{mnt}/{view}' | wc -l", shell=True, check=True,
                             capture_output=True, text=True).stdout
        if int(out) != n + 1:
            c.error(f"{what}_find_count", f"find listed {int(out) - 1} members of {n}")
            return
        peak = kib(proc.pid, "VmHWM")
        c.add(f"{what}_find_peak_per_member", (peak - base) * 1024 / n, 150, "bytes/member")
        # every member looked up (fnodes and nodes made), then forgotten
        subprocess.run(f"find '{mnt}/{view}' -size -1000000 | wc -l", shell=True, check=True,
                       capture_output=True)
        drop_kernel_entries()
        left = kib(proc.pid, "VmRSS")
        c.add(f"{what}_after_forget_per_member", (left - base) * 1024 / n, forget_limit,
              "bytes/member")


def fold(c, build, work, n):
    """find of an n-member fold: 64 bytes a member left after forget, most
    of it the open view's own tables (about 40). It read 47-71 from run to
    run of one build while malloc's fastbins kept freed nodes apart from
    the arenas' tops, which malloc_trim never trims but the main arena's
    (fs/main.c), and each request thread the pool started during the find
    held 128 KiB of zeroed thread-local scratch (format/sf_codec.c):
    44.4-50.3 in seven runs since."""
    src, _, _, _ = data.small_fold(work, build / "tools", n, 10, lo=16, hi=64, native=False)
    find_members(c, build, src, "f", n, "fold", 64)


def tar_alone(c, build, work, n):
    """find of a tar of n members with no index (issue 27): its view is a
    fold whose index is built in memory, so the fold's limits hold for its
    peak; what is left per member once the kernel forgets also holds the
    index itself (32 bytes and 2 bits a member, charged to the budget),
    which a fold reads from its file."""
    find_members(c, build, data.lone_tar(work, n), "t", n, "tar_alone", 64 + 33)


# A Python fold over every sample of an unindexed tar, in a child: its peak
# resident memory above what it held once the module was imported. The
# peak is the child's VmHWM, not getrusage's ru_maxrss: a child that
# subprocess starts by vfork takes its parent's peak as its own at exec,
# and this script's own peak, once it has made the 1,000,000-member tar
# (tarfile keeps a TarInfo per member), is 429 MB: the figure read 260
# bytes a sample where the fold's own peak was 36 (issue 39).
MODULE_FOLD = """
import sys
import shardfs

def kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])

shardfs.set_cache_size(int(sys.argv[2]))
base = kib("VmRSS")
with shardfs.open(sys.argv[1]) as v:
    n = sum(1 for _ in v.fold())
print(n, kib("VmHWM") - base)
"""


def module_fold(c, build, work, n):
    """The Python module's fold over an unindexed tar of n members (issue 39):
    within its cache budget (160 MiB: the walk of 1,000,000 headers holds
    128 MiB at its peak, charged) plus 48 bytes a sample and 24 MiB
    (docs/python.md)."""
    budget = 160 << 20
    env = dict(os.environ, PYTHONPATH=str(build / "python"))
    out = subprocess.run([sys.executable, "-c", MODULE_FOLD, str(data.lone_tar(work, n) / "t.tar"),
                          str(budget)], env=env, check=True, capture_output=True,
                         text=True).stdout.split()
    if int(out[0]) != n:
        c.error("module_fold_count", f"the fold gave {out[0]} samples of {n}")
        return
    c.add("module_fold_peak_over_budget", (int(out[1]) * 1024 - budget) / n, 48 + (24 << 20) / n,
          f"bytes/sample ({n} samples)")


def names_come_and_go(c, build, work, n):
    """A SRC directory where n uniquely named files are created, looked up
    and deleted one after another (rolling checkpoints): memory stays flat
    (deleted names' slots are reused). Measured over the second half, in
    anonymous memory, each mark once the kernel has forgotten the names it
    looked up: how many it still held, and the daemon's heap settling over
    the first tens of thousands (0.5-1.5 MiB, more on a busy machine),
    made the growth from n/10 vary from 0.6 to 4.4 MiB with no name kept.
    A name kept costs over 10 bytes: 1 MiB over 100,000 names."""
    src = Path(tempfile.mkdtemp(dir=work))
    d = src / "ckpt"
    d.mkdir()
    with mounts.shardfs(build / "fs" / "shardfs", src) as (mnt, proc, _):
        os.stat(mnt / "ckpt")
        settle_threads(mnt)
        marks = []
        for i in range(n):
            p = d / f"step-{i:08d}.bin"
            p.write_bytes(b"x")
            os.stat(mnt / "ckpt" / p.name)
            p.unlink()
            if i in (n // 2, n - 1):
                drop_kernel_entries()
                marks.append(kib(proc.pid, "RssAnon"))
        c.add("names_come_and_go_growth", (marks[1] - marks[0]) / 1024, 1,
              f"MiB ({n - n // 2} names)")
    os.rmdir(d)
    os.rmdir(src)


def syscalls_of(pid, run):
    """The system calls process `pid` (all its threads) makes while run()
    runs, counted by strace."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".strace") as out:
        tracer = subprocess.Popen(["strace", "-c", "-f", "-q", "-p", str(pid), "-o", out.name],
                                  stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attached to every thread
        try:
            run()
        finally:
            tracer.send_signal(2)
            tracer.wait(timeout=30)
        for line in out.read().splitlines():
            if line.rstrip().endswith(" total"):
                return int(line.split()[3])
    raise RuntimeError("strace printed no total")


def containers(c, build, work, n, make=data.many_containers, what="containers"):
    """ls of n containers: header checks only (25 MiB for 10,000: 2,560
    bytes per container), batched through io_uring (about one system call
    a container where checking one at a time took ten); find of them:
    bounded by --max-open. `make` writes them (tet files; unindexed tars)."""
    src = make(work, n)
    with mounts.shardfs(build / "fs" / "shardfs", src) as (mnt, proc, _):
        os.stat(mnt / ".shardfs")
        calls = syscalls_of(proc.pid, lambda: subprocess.run(["ls", str(mnt)], check=True,
                                                             stdout=subprocess.DEVNULL))
        c.add(f"{what}_ls_syscalls_per_container", calls / n, 2, "calls/container")
    with mounts.shardfs(build / "fs" / "shardfs", src) as (mnt, proc, _):
        os.stat(mnt / ".shardfs")
        settle_threads(mnt)
        base, anon_base = kib(proc.pid, "VmRSS"), kib(proc.pid, "RssAnon")
        got = subprocess.run(["ls", str(mnt)], check=True, capture_output=True, text=True).stdout
        if len(got.split()) != 2 * n:
            c.error(f"{what}_ls_count", f"ls showed {len(got.split())} entries, want {2 * n}")
            return
        after = kib(proc.pid, "VmRSS")
        c.add(f"{what}_ls_per_container", (after - base) * 1024 / n, 2560, "bytes/container")
        # find enters every view: the views open at a time are bounded
        # (--max-open, default 1024), and so are memory and mappings,
        # whatever n (185 MiB and a mapping per container before)
        with AnonPeak(proc.pid) as peak:
            out = subprocess.run(f"find '{mnt}' | wc -l", shell=True, check=True,
                                 capture_output=True, text=True).stdout
        if int(out) < 2 * n:
            c.error(f"{what}_find_count", f"find listed {int(out)} paths for {n} containers")
            return
        # 40 MiB until tet views became zarr hierarchies with consolidated
        # metadata (issue 28): about 10 KiB more per open view, 44 MiB here.
        # Measured as VmHWM, which also counts the mapped pages of the open
        # views the kernel keeps or reclaims as it likes, the same build
        # read 39-65.7 MiB from run to run (sessions 8 and 9, issue 39): the
        # peak is now of anonymous memory only, above a baseline taken once
        # every request thread has worked (AnonPeak, settle_threads).
        c.add(f"{what}_find_peak", (peak.peak - anon_base) / 1024, 64, f"MiB ({n} containers)")
        with open(f"/proc/{proc.pid}/maps") as f:
            c.add(f"{what}_find_mappings", sum(1 for _ in f), 2048, f"({n} containers)")


def tars(c, build, work, n):
    """The same for a directory of n tars with no index (issue 27: 10,000):
    a listing reads each tar's first block only, entering each walks it."""
    containers(c, build, work, n, data.many_tars, "tars")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", type=Path)
    ap.add_argument("results", type=Path)
    ap.add_argument("--members", type=int, default=200_000)
    ap.add_argument("--tar-members", type=int, default=1_000_000)
    ap.add_argument("--names", type=int, default=200_000)
    ap.add_argument("--containers", type=int, default=5_000)
    ap.add_argument("--tars", type=int, default=10_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/shardfs-scale"))
    a = ap.parse_args()
    a.results.unlink(missing_ok=True)
    a.workdir.mkdir(parents=True, exist_ok=True)
    c = Checks(a.results)
    build = a.build.resolve()
    for check, size in ((fold, a.members), (tar_alone, a.tar_members),
                        (module_fold, a.tar_members), (names_come_and_go, a.names),
                        (containers, a.containers), (tars, a.tars)):
        try:
            check(c, build, a.workdir, size)
        except Exception as ex:  # one failed check must not hide the others
            c.error(check.__name__, repr(ex))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
