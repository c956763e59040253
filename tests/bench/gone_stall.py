#!/usr/bin/python3
"""How long deleting containers holds up other requests while the kernel
holds many nodes of another view.

    /usr/bin/python3 tests/bench/gone_stall.py NAME=BUILD [NAME=BUILD ...]
                     [--rounds 3] [--members 100000] [--tars 200] [-- SHARDFS_ARGS]

SRC holds a tar of `--members` empty members (in directories of 1,000)
and `--tars` small tars of one member each. Each round mounts every build
in turn (default options, so no-open: inotify lets a deleted container's
view go), stats every member of the big tar and opens the member of each
small one, so the kernel holds them all, then deletes the small tars while
another thread stats .shardfs/stats.json every millisecond (a LOOKUP
each time, which takes the tree's lock). Prints, per build, how long until
every small tar's view was let go (stats.json's views_closed), and the
probe's p50, p99 and slowest stat meanwhile, in ms, and the load
(/proc/loadavg) before and after. Each round also says how many FORGETs
came meanwhile and how many LOOKUPs a stat of every 997th member of the
big tar cost after: a round whose big view the kernel dropped (memory
pressure) measured nothing.
"""
import argparse
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mounts import mounted  # noqa: E402


def big_tar(path, members):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(members):
            info = tarfile.TarInfo(f"d{i // 1000:03d}/f{i % 1000:03d}")
            t.addfile(info, io.BytesIO(b""))


def small_tar():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        info = tarfile.TarInfo("m")
        info.size = 5
        t.addfile(info, io.BytesIO(b"small"))
    return buf.getvalue()


def stats(mnt):
    with open(mnt / ".shardfs" / "stats.json", "rb", buffering=0) as f:
        return json.loads(f.read())


def probe(path, stop, took):
    while not stop.is_set():
        t = time.perf_counter()
        os.stat(path)
        took.append(time.perf_counter() - t)
        time.sleep(0.001)


def one(build, args, src, members, tars, small):
    for k in range(tars):
        (src / f"s{k:04d}.tar").write_bytes(small)
    cmd = lambda mnt: [str(Path(build) / "fs" / "shardfs"), str(src), str(mnt), "-f",
                       "--max-nodes", str(2 * members), *args]
    with mounted(cmd) as (mnt, _, _):
        for i in range(members):
            os.stat(mnt / "big" / f"d{i // 1000:03d}" / f"f{i % 1000:03d}")
        # each small tar's member held open, so that the kernel keeps its
        # nodes until the daemon has it drop them
        held = [open(mnt / f"s{k:04d}" / "m", "rb") for k in range(tars)]
        assert all(f.read() == b"small" for f in held)
        s0 = stats(mnt)
        closed = s0["views_closed"]
        stop, took = threading.Event(), []
        th = threading.Thread(target=probe, args=(mnt / ".shardfs" / "stats.json", stop, took))
        th.start()
        time.sleep(0.2)
        t0 = time.perf_counter()
        for k in range(tars):
            os.unlink(src / f"s{k:04d}.tar")
        deadline = t0 + 120
        while stats(mnt)["views_closed"] < closed + tars and time.perf_counter() < deadline:
            time.sleep(0.005)
        done = time.perf_counter() - t0
        stop.set()
        th.join()
        for f in held:
            f.close()
        s1 = stats(mnt)
        let_go = s1["views_closed"] - closed
        forgets = s1["requests"]["forget"] - s0["requests"]["forget"]
        # the big view's nodes are still held: its members stat with no LOOKUP
        # (reading stats.json is a LOOKUP too)
        lookups = [stats(mnt)["requests"]["lookup"] for _ in range(2)]
        for i in range(0, members, 997):
            os.stat(mnt / "big" / f"d{i // 1000:03d}" / f"f{i % 1000:03d}")
        relooked = stats(mnt)["requests"]["lookup"] - 2 * lookups[1] + lookups[0]
    return done, let_go, took, forgets, relooked


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("builds", nargs="+", help="NAME=BUILD_DIR")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--members", type=int, default=100000)
    p.add_argument("--tars", type=int, default=200)
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    a = p.parse_args(argv)
    builds = [b.split("=", 1) for b in a.builds]
    with tempfile.TemporaryDirectory(prefix="shardfs-gone-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        big_tar(src / "big.tar", a.members)
        small = small_tar()
        res = {name: [] for name, _ in builds}
        print("load before:", open("/proc/loadavg").read().strip())
        for r in range(a.rounds):
            order = builds if r % 2 == 0 else builds[::-1]
            for name, build in order:
                done, let_go, took, forgets, relooked = one(build, extra, src, a.members, a.tars, small)
                res[name].append((done, took))
                took_ms = sorted(t * 1000 for t in took)
                print(f"round {r} {name}: {let_go}/{a.tars} views let go in {done:.3f} s; "
                      f"{len(took)} probes, slowest {took_ms[-1]:.1f} ms; {forgets} FORGETs "
                      f"meanwhile; big view's members looked up again: {relooked}", flush=True)
        print("load after:", open("/proc/loadavg").read().strip())
        for name, _ in builds:
            took_ms = sorted(t * 1000 for _, took in res[name] for t in took)
            q = statistics.quantiles(took_ms, n=100)
            dones = [d for d, _ in res[name]]
            print(f"{name}: let go in {statistics.median(dones):.3f} s (median of "
                  f"{len(dones)}); probe p50 {q[49]:.2f} ms, p99 {q[98]:.2f} ms, "
                  f"slowest {took_ms[-1]:.1f} ms")


if __name__ == "__main__":
    main()
