#!/usr/bin/python3
"""Benchmark of a large iTar fold through the mount (issue: scale). Not a
test: it prints figures. Writes (once) a fold of --members small members
with tests/writers/taridx_writer.py, drops the page cache when allowed,
mounts it and measures:

  first lookup   open of the index + lookup build + one member read
  later lookups  stat of random flat names (O(1): one bucket of rows)
  misses         names that do not exist (the first one lists the fold)
  listing        os.scandir of the whole fold, with and without stat
  memory         the lookup's bytes per row (info.json) and the daemon's RSS

usage: bench_taridx.py [--members N] [--dir DIR] [--build BUILD] [--warm]
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


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/shardfs-bench-taridx")
    ap.add_argument("--warm", action="store_true", help="keep the page cache")
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
        print(f"first miss (lists the fold once): {dt * 1000:.0f} ms")
        dt, _ = timed(lambda: [miss(f"x{i}.txt") for i in range(10000)])
        print(f"later misses: {dt / 10000 * 1e6:.1f} us each")
        dt, cnt = timed(lambda: sum(1 for _ in os.scandir(view)))
        assert cnt == n
        print(f"full listing (os.scandir): {cnt} entries in {dt:.2f} s")
        dt, total = timed(lambda: sum(e.stat().st_size for e in os.scandir(view)))
        print(f"listing with stat of every entry: {dt:.2f} s, {total} bytes")
        print(f"daemon anonymous RSS after listing: {rss_kib(proc.pid) / 1024:.0f} MiB")
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait()
        os.rmdir(mnt)


if __name__ == "__main__":
    main()
