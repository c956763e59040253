#!/usr/bin/python3
"""Benchmark of a tar with no index (issue 27) against the same tar as a
fold with its `.taridx`. Not a test: it prints figures. Writes (once) a tar
of --members members of equal size, --gib GiB in all, and a hard link of it
as the fold's one shard (indexed with shardfs-taridx), reads the tar once
so that it is in the page cache, then mounts each side --runs times and
measures:

  first lookup   stat of one member in a view just entered: for the tar
                 alone, the walk of every header and the index built in
                 memory; for the fold, the index opened and its lookup built
  later lookups  stat of members spread over the tar
  listing        os.listdir of the whole view
  rss            the daemon's resident set after all that

usage: bench_tar_alone.py [--members N] [--gib G] [--dir DIR] [--build BUILD] [--runs R]
"""
import argparse
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "bench"))
import mounts  # noqa: E402


def write(d, n, gib, tools):
    tar = d / "alone" / "big.tar"
    if tar.exists():
        return
    (d / "alone").mkdir(parents=True, exist_ok=True)
    (d / "fold").mkdir(parents=True, exist_ok=True)
    size = (int(gib * (1 << 30)) // n) - 512
    body = os.urandom(size)
    with open(tar, "wb") as f:
        for i in range(n):
            ti = tarfile.TarInfo(f"{i:07d}.bin")
            ti.size = size
            f.write(ti.tobuf(tarfile.GNU_FORMAT) + body + bytes(-size % 512))
        f.write(bytes(1024))
    os.link(tar, d / "fold" / "big_0000.tar")
    subprocess.run([str(tools / "shardfs-taridx"), "--quiet", str(d / "fold"), "big"], check=True)


def measure(binary, src, n):
    with mounts.shardfs(binary, src) as (mnt, proc, _):
        view = mnt / "big"
        os.stat(view)
        t = time.monotonic()
        os.stat(view / f"{n // 2 + 17:07d}.bin")
        first = time.monotonic() - t
        picks = range(0, n, max(1, n // 200))
        t = time.monotonic()
        for i in picks:
            os.stat(view / f"{i:07d}.bin")
        later = (time.monotonic() - t) / len(picks)
        t = time.monotonic()
        listed = len(os.listdir(view))
        listing = time.monotonic() - t
        rss = mounts.rss_kib(proc.pid) / 1024
    assert listed == n, listed
    return first, later, listing, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=100_000)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/shardfs-bench-tar-alone"))
    ap.add_argument("--build", type=Path, default=REPO / "build-release")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    build = a.build.resolve()
    write(a.dir, a.members, a.gib, build / "tools")
    with open(a.dir / "alone" / "big.tar", "rb") as f:
        while f.read(1 << 24):
            pass
    print(f"{a.members} members, {(a.dir / 'alone' / 'big.tar').stat().st_size} bytes, tar in the page cache")
    for r in range(a.runs):
        for side in ("alone", "fold"):
            first, later, listing, rss = measure(build / "fs" / "shardfs", a.dir / side, a.members)
            print(f"run {r + 1} {side:<5}  first lookup {first * 1000:7.0f} ms  later lookups "
                  f"{later * 1e6:5.0f} us  listing {listing:5.2f} s  rss {rss:6.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
