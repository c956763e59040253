#!/usr/bin/python3
"""A/B of two shardfs binaries on a Python small-file loop.

    /usr/bin/python3 tests/bench/ab_small.py A_SHARDFS B_SHARDFS [--kind src|fold]
                                             [--workdir DIR] [--bursts 10]

Both daemons are mounted at once over the same SRC (20,000 files of 1-16 KiB
in 20 directories, or a .taridx fold of 20,000 such members, written once
into --workdir), and bursts alternate between them, so that a machine whose
load drifts treats both alike. Each burst opens 2,000 files never opened on
that mount (first pass), then the same 2,000 again (second pass), with
`with open(p, "rb") as f: f.read()`. Prints files/s per burst and the
medians, and the daemon's CPU time per open (all its threads' schedstat).
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "writers"))
import taridx_writer as xw  # noqa: E402
from cases import schedstat_seconds as cpu_seconds  # noqa: E402

N, BURST = 20000, 2000


def make(src):
    rnd = random.Random(3)
    for i in range(N):
        d = src / "files" / f"d{i % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}").write_bytes(rnd.randbytes(rnd.randint(1024, 16384)))
    xw.write_fold(src / "fold", "f", [(f"{i:06d}", {"bin": rnd.randbytes(rnd.randint(1024, 16384))})
                                      for i in range(N)], shard_maxfiles=2000)


def loop(mnt, rels):
    t = time.perf_counter()
    for r in rels:
        with open(mnt / r, "rb") as f:
            f.read()
    return len(rels) / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--kind", choices=("src", "fold"), default="src")
    ap.add_argument("--workdir", default="/tmp/shardfs-ab-small")
    ap.add_argument("--bursts", type=int, default=N // BURST)
    args = ap.parse_args()
    work = Path(args.workdir)
    src = work / "src"
    if not (src / "fold" / "f.taridx").exists():
        make(src)
    if args.kind == "src":
        rels = sorted(str(p.relative_to(src)) for p in (src / "files").rglob("f*"))
    else:
        rels = [f"fold/f/{i:06d}.bin" for i in range(N)]
    random.Random(1).shuffle(rels)
    for p in src.rglob("*"):
        if p.is_file():
            p.read_bytes()
    daemons = {}
    try:
        for name, exe in (("A", args.a), ("B", args.b)):
            mnt = work / f"mnt-{name}"
            mnt.mkdir(exist_ok=True)
            daemons[name] = (mnt, subprocess.Popen([exe, str(src), str(mnt), "-f"]))
        for mnt, _ in daemons.values():
            deadline = time.monotonic() + 30
            while not os.path.ismount(mnt):
                assert time.monotonic() < deadline, f"{mnt} did not mount"
                time.sleep(0.01)
            os.listdir(mnt / ("fold/f" if args.kind == "fold" else "files"))
        res = {name: [] for name in daemons}
        for i in range(min(args.bursts, N // BURST)):
            sub = rels[i * BURST:(i + 1) * BURST]
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                mnt, proc = daemons[name]
                c0 = cpu_seconds(proc.pid)
                first = loop(mnt, sub)
                c1 = cpu_seconds(proc.pid)
                second = loop(mnt, sub)
                c2 = cpu_seconds(proc.pid)
                res[name].append((first, second, (c1 - c0) / BURST * 1e6, (c2 - c1) / BURST * 1e6))
    finally:
        for mnt, proc in daemons.values():
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, timeout=30)
            proc.wait(timeout=30)
    for name, rows in res.items():
        for k, label in enumerate(("first pass", "second pass")):
            runs = [round(r[k]) for r in rows]
            print(f"{args.kind} {name} {label} files/s: median {statistics.median(runs):,.0f} "
                  f"best {max(runs):,} bursts {runs}")
        print(f"{args.kind} {name} daemon CPU per open: first pass "
              f"{statistics.median(r[2] for r in rows):.1f} us, second pass "
              f"{statistics.median(r[3] for r in rows):.1f} us")
    print("load average", " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
