#!/usr/bin/python3
"""A/B of two shardfs builds, both sides alternated.

    /usr/bin/python3 tests/bench/ab_small.py A_SHARDFS B_SHARDFS [--kind src|fold]
                                             [--workdir DIR] [--bursts 10]
    /usr/bin/python3 tests/bench/ab_small.py A_SHARDFS B_SHARDFS --groups small,large
                                             [--rounds 3] [--runs 3] [--workdir DIR]

The first form mounts both daemons at once (default options) over the same
SRC (20,000 files of 1-16 KiB in 20 directories, or a .taridx fold of
20,000 such members, written once into --workdir), and bursts alternate
between them, so that a machine whose load drifts treats both alike. Each
burst reads, with each reader of the bench's `open` group (os.open/os.read
and Python's open()), 1,000 files never opened on that mount (first pass),
then the same 1,000 again (second pass). Prints files/s per burst and the
medians, the daemon's CPU per file (all its threads' schedstat) and the
FUSE requests per file of each pass by kind (stats.json, less its own
reads: the same figure every burst, as long as the kernel keeps its
entries).

The second form runs `run.py --only GROUPS --runs RUNS` --rounds times for
each build (the build directory is the binary's grandparent), the side
that goes first swapped every round, each build with its own data
directory under --workdir (its own indexer writes the indexes), and prints
every comparison's ratio per side: the median over the rounds, its spread
(lowest and highest round) and B's median over A's. A difference smaller
than the spread of either side is noise. A round whose JSON summary is
already in --workdir is read, not run again: an interrupted A/B resumes
(and --rounds 2 after an interrupted third round reports the first two).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "writers"))
import taridx_writer as xw  # noqa: E402
from cases import READERS, stats  # noqa: E402
from cases import _pass as one_pass  # noqa: E402

N, BURST = 20000, 1000
URING_SWITCH = Path("/sys/module/fuse/parameters/enable_uring")


def make(src):
    rnd = random.Random(3)
    for i in range(N):
        d = src / "files" / f"d{i % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}").write_bytes(rnd.randbytes(rnd.randint(1024, 16384)))
    xw.write_fold(src / "fold", "f", [(f"{i:06d}", {"bin": rnd.randbytes(rnd.randint(1024, 16384))})
                                      for i in range(N)], shard_maxfiles=2000)


def uring_switch():
    """The kernel's FUSE io_uring switch: with it on, a build whose default
    is --io-uring auto serves its mount over io_uring."""
    return URING_SWITCH.read_text().strip() if URING_SWITCH.exists() else "absent"


def bursts(args):
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
    passes = ("first pass", "second pass")
    res = {(name, r, p): [] for name in ("A", "B") for r in READERS for p in passes}
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
        for name, (mnt, _) in daemons.items():
            print(f"{name}: {stats(mnt)['transport']}")
        switch = uring_switch()
        take = iter(range(0, N, BURST))
        for i in range(min(args.bursts, N // BURST // len(READERS))):
            for r, reader in READERS.items():
                at = next(take)
                sub = rels[at:at + BURST]
                for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                    mnt, proc = daemons[name]
                    paths = [mnt / x for x in sub]
                    for p in passes:
                        res[name, r, p].append(one_pass(mnt, proc, reader, paths))
        if uring_switch() != switch:
            print(f"the kernel's io_uring switch changed during the run ({switch} -> "
                  f"{uring_switch()})")
    finally:
        for mnt, proc in daemons.values():
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, timeout=30)
            proc.wait(timeout=30)
    for (name, r, p), got in res.items():
        rates = [round(x[0]) for x in got]
        cpu = statistics.median(x[1] for x in got)
        kinds = {k: statistics.median(x[2][k] for x in got) for k in got[0][2]}
        reqs = " ".join(f"{k}={v:.2f}" for k, v in kinds.items() if v >= 0.005) or "none"
        print(f"{args.kind} {name} {r} {p}: files/s median {statistics.median(rates):,.0f} "
              f"bursts {rates}; daemon CPU {cpu:.1f} us/file; requests per file {reqs}")
    print("load average", " ".join(f"{x:.1f}" for x in os.getloadavg()))


def rounds(args):
    """run.py's groups for each build in turn, alternated round by round."""
    work = Path(args.workdir)
    sides = {name: Path(exe).resolve().parents[1] for name, exe in (("A", args.a), ("B", args.b))}
    got = {name: [] for name in sides}
    for rnd in range(args.rounds):
        order = ("A", "B") if rnd % 2 == 0 else ("B", "A")
        for name in order:
            out = work / f"round{rnd}-{name}.json"
            if out.exists():
                got[name].append(json.loads(out.read_text())["results"])
                continue
            # a build whose default is --io-uring auto serves its mounts
            # over io_uring while the switch is on: said for every round
            switch = uring_switch()
            subprocess.run([sys.executable, str(HERE / "run.py"), "--only", args.groups,
                            "--runs", str(args.runs), "--build", str(sides[name]),
                            "--workdir", str(work / f"data-{name}"), "--json", str(out)],
                           check=True, stdout=subprocess.DEVNULL)
            got[name].append(json.loads(out.read_text())["results"])
            print(f"round {rnd} {name} done, the kernel's io_uring switch {switch} at its start "
                  f"and {uring_switch()} at its end, load average "
                  f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    # each comparison by its case and reference, in the order run.py gave them
    keys = [(r["case"], r["reference"]) for r in got["A"][0]]
    for key in keys:
        line = f"{key[0]:<24} vs {key[1][:34]:<34}"
        med = {}
        for name in sides:
            ratios = [r["ratio"] for run in got[name] for r in run
                      if (r["case"], r["reference"]) == key]
            figs = [r["figure"] for run in got[name] for r in run
                    if (r["case"], r["reference"]) == key]
            if not ratios:
                line += f"  {name}: -"
                continue
            med[name] = statistics.median(ratios)
            line += (f"  {name}: ratio {med[name]:.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
                     f" figure {statistics.median(figs):.4g}")
        if len(med) == 2 and med["A"]:
            line += f"  B/A {med['B'] / med['A']:.3f}"
        print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--kind", choices=("src", "fold"), default="src")
    ap.add_argument("--workdir", default="/tmp/shardfs-ab-small")
    ap.add_argument("--bursts", type=int, default=N // BURST // len(READERS))
    ap.add_argument("--groups", help="run.py's case groups, comma-separated: the second form")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rounds(args) if args.groups else bursts(args)


if __name__ == "__main__":
    main()
