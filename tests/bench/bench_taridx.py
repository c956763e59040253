#!/usr/bin/python3
"""Benchmark of a large iTar fold through the mount (issue: scale). Not a
test: it prints figures. Writes (once) a fold of --members small members
with tests/writers/taridx_writer.py, drops the page cache when allowed,
mounts it and measures:

  first lookup   open of the index + lookup build + one member read
  later lookups  stat of random flat names (O(1): one bucket of rows)
  misses         names that do not exist (the first one reads every tar header
                 once, to know the root names the index cannot key; none lists)
  listing        os.scandir of the whole fold, with and without stat
  memory         the lookup's bytes per row (info.json) and the daemon's RSS
  samples.jsonl  (--samples) the first stat (the counting pass), a streaming
                 read of the whole file, random reads, and the daemon's RSS;
                 nothing else is measured then (a listing of 10,000,000
                 members would need gigabytes)

usage: bench_taridx.py [--members N] [--dir DIR] [--build BUILD] [--warm] [--samples]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "writers"))
import taridx_writer as tw  # noqa: E402


def rss_kib(pid):
    """Resident anonymous memory: mapped tar pages are page cache, not ours."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    """User + system CPU seconds of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def bench_samples(view, pid):
    path = view / ".shardfs" / "samples.jsonl"
    rss0 = rss_kib(pid)
    cpu0 = cpu_s(pid)
    dt, size = timed(lambda: os.stat(path).st_size)
    print(f"samples.jsonl: {size} bytes; first stat (counting pass) {dt:.2f} s "
          f"(daemon CPU {cpu_s(pid) - cpu0:.2f} s), "
          f"daemon anonymous RSS {rss0 / 1024:.0f} -> {rss_kib(pid) / 1024:.0f} MiB")
    # before the whole file is in the page cache
    with open(path, "rb", buffering=0) as f:
        offs = [random.randrange(size) for _ in range(100)]
        t = time.perf_counter()
        for off in offs:
            f.seek(off)
            f.read(4096)
        dt = time.perf_counter() - t
    print(f"random 4 KiB reads: {dt / len(offs) * 1000:.1f} ms each")
    cpu0 = cpu_s(pid)
    peak = 0

    def stream():
        nonlocal peak
        lines = got = 0
        with open(path, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    return lines, got
                lines += b.count(b"\n")
                got += len(b)
                peak = max(peak, rss_kib(pid))
    dt, (lines, got) = timed(stream)
    assert got == size
    cpu = cpu_s(pid) - cpu0
    print(f"streaming read: {lines} lines in {dt:.2f} s, {got / dt / 1e6:.0f} MB/s; "
          f"daemon CPU {cpu:.2f} s ({got / cpu / 1e6:.0f} MB per CPU second); "
          f"daemon anonymous RSS at most {peak / 1024:.0f} MiB")
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/shardfs-bench-taridx")
    ap.add_argument("--warm", action="store_true", help="keep the page cache")
    ap.add_argument("--samples", action="store_true", help="measure .shardfs/samples.jsonl only")
    ap.add_argument("--build", default=os.environ.get("SHARDFS_BUILD", str(REPO / "build")))
    a = ap.parse_args()
    src = Path(a.dir)
    if not (src / "big.taridx").exists():
        dt, _ = timed(lambda: tw.write_scale(src, a.members))
        print(f"wrote {a.members} members in {dt:.1f} s")
    n = int.from_bytes((src / "big.taridx").read_bytes()[24:32], "little")
    cache = "warm page cache"
    if not a.warm:
        subprocess.run(["sync"])
        try:
            Path("/proc/sys/vm/drop_caches").write_text("3")
            cache = "cold page cache"
        except OSError:
            pass
    mnt = Path(tempfile.mkdtemp())
    proc = subprocess.Popen([str(Path(a.build) / "fs" / "shardfs"), str(src), str(mnt), "-f"],
                            stderr=subprocess.DEVNULL)
    try:
        while not os.path.ismount(mnt):
            time.sleep(0.01)
        view = mnt / "big"
        if a.samples:
            print(f"rows: {n} ({cache})")
            bench_samples(view, proc.pid)
            return
        k = random.randrange(n)
        dt, data = timed(lambda: (view / f"{k:08d}.txt").read_bytes())
        assert data == tw.scale_payload(k)
        print(f"rows: {n} ({cache})")
        print(f"first lookup (open + index build + read): {dt * 1000:.0f} ms")
        keys = random.sample(range(n), 20000)
        dt, _ = timed(lambda: [os.stat(view / f"{i:08d}.txt") for i in keys])
        print(f"later lookups: {dt / len(keys) * 1e6:.1f} us each ({len(keys)} random stats)")
        info = json.loads((view / ".shardfs" / "info.json").read_text())
        print(f"lookup structure: {info['lookup_bytes'] / n:.2f} bytes per row")
        print(f"daemon anonymous RSS before listing: {rss_kib(proc.pid) / 1024:.0f} MiB")

        def miss(name):
            try:
                os.stat(view / name)
            except FileNotFoundError:
                return True
            return False
        dt, ok = timed(lambda: miss("nothere.txt"))
        assert ok
        print(f"first miss (one pass over the headers): {dt * 1000:.0f} ms")
        dt, _ = timed(lambda: [miss(f"x{i}.txt") for i in range(10000)])
        print(f"later misses: {dt / 10000 * 1e6:.1f} us each")
        dt, cnt = timed(lambda: sum(1 for _ in os.scandir(view)))
        assert cnt == n
        print(f"full listing (os.scandir, builds the tree): {cnt} entries in {dt:.2f} s")
        dt, total = timed(lambda: sum(e.stat().st_size for e in os.scandir(view)))
        print(f"listing with stat of every entry: {dt:.2f} s, {total} bytes")
        print(f"daemon anonymous RSS after listing: {rss_kib(proc.pid) / 1024:.0f} MiB")
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait()
        os.rmdir(mnt)


if __name__ == "__main__":
    main()
