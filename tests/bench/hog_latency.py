#!/usr/bin/python3
"""Latency of small reads with and without a CPU-bound process per CPU.

    /usr/bin/python3 tests/bench/hog_latency.py NAME=BUILD [NAME=BUILD ...]
                     [--rounds 5] [--reads 1000] [--hogs N] [-- SHARDFS_ARGS]

Each build's daemon mounts the same SRC (8 files of 1-4 KiB) at once, and
rounds alternate between them, so a machine whose load drifts treats all
alike. In each round every mount is read `--reads` times with and then
without hogs (`--hogs`, default one per CPU, started and killed each
time): os.open, os.read, os.close of a SRC file (an OPEN and a FLUSH reach
the daemon each time, the bytes being in the page cache after the first),
and of .shardfs/errors (an OPEN and a READ). Prints p50, p99 and the
slowest of each, in µs, over all rounds, the waits for a request that did
not poll out of the requests taken (stats.json's polls_skipped), and the
load (/proc/loadavg) before and after. A daemon that polls for requests while every CPU is
taken answers late (docs/options.md, --spin-us).
"""
import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mounts import mounted  # noqa: E402

HOG = "while 1: pass"


def read_once(path):
    t = time.perf_counter_ns()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    return time.perf_counter_ns() - t


def waits(mnt):
    """Requests taken from /dev/fuse, and the waits for one that did not
    poll (0 from a daemon that does not count them)."""
    s = json.loads((mnt / ".shardfs" / "stats.json").read_bytes())
    return s["queues"]["dev_fuse"], s.get("polls_skipped", 0)


def sample(mnt, names, reads):
    """Latencies (ns) of reading the files in turn, and .shardfs/errors;
    the requests taken meanwhile and the waits that did not poll."""
    before = waits(mnt)
    files = [read_once(mnt / names[i % len(names)]) for i in range(reads)]
    errors = [read_once(mnt / ".shardfs" / "errors") for _ in range(reads // 4)]
    return files, errors, [b - a for a, b in zip(before, waits(mnt))]


@contextlib.contextmanager
def hogs(n):
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]
    try:
        time.sleep(0.2)  # running before the first read
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] / 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+", help="NAME=BUILD_DIR")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reads", type=int, default=1000)
    ap.add_argument("--hogs", type=int, default=os.cpu_count())
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = ap.parse_args(argv[:cut]), argv[cut + 1:]
    builds = [b.split("=", 1) for b in args.builds]
    print("load before:", Path("/proc/loadavg").read_text().strip())
    with tempfile.TemporaryDirectory(prefix="shardfs-hog-") as tmp, contextlib.ExitStack() as st:
        src = Path(tmp) / "src"
        src.mkdir()
        rnd = random.Random(5)
        names = [f"f{i}" for i in range(8)]
        for n in names:
            (src / n).write_bytes(rnd.randbytes(rnd.randint(1024, 4096)))
        mnts = {}
        for name, build in builds:
            exe = str(Path(build) / "fs" / "shardfs")
            mnts[name] = st.enter_context(mounted(
                lambda m, exe=exe: [exe, str(src), str(m), "-f", *extra], tmp))[0]
        for mnt in mnts.values():  # each file read once: its bytes in the page cache
            for n in names:
                assert (mnt / n).read_bytes() == (src / n).read_bytes()
        took = {(name, h, what): [] for name in mnts for h in (True, False)
                for what in ("file", "errors")}
        count = {(name, h): [0, 0] for name in mnts for h in (True, False)}
        for r in range(args.rounds):
            order = list(mnts) if r % 2 == 0 else list(reversed(mnts))
            for h in (True, False):
                with hogs(args.hogs) if h else contextlib.nullcontext():
                    for name in order:
                        files, errors, n = sample(mnts[name], names, args.reads)
                        took[name, h, "file"] += files
                        took[name, h, "errors"] += errors
                        count[name, h] = [a + b for a, b in zip(count[name, h], n)]
    print("load after: ", Path("/proc/loadavg").read_text().strip())
    print(f"{'build':<10} {'hogs':>4} {'read of':<8} {'n':>6} {'p50 µs':>9} {'p99 µs':>9} "
          f"{'max µs':>9}  not polled")
    for (name, h, what), v in took.items():
        taken, skipped = count[name, h]
        print(f"{name:<10} {args.hogs if h else 0:>4} {what:<8} {len(v):>6} "
              f"{pct(v, 0.5):>9.0f} {pct(v, 0.99):>9.0f} {max(v) / 1000:>9.0f}  "
              f"{skipped}/{taken}")


if __name__ == "__main__":
    main()
