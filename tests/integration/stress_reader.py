"""One stress reader (run as its own process by test_stress.py):

    stress_reader.py PLAN.json SEED SECONDS

PLAN.json maps each mounted path to a file holding its expected bytes. The
reader does random preads (page cache dropped first, so they reach the
daemon) until SECONDS pass, and prints one JSON line: reads, bytes, and
every mismatch or error."""
import json
import os
import random
import sys
import time


def run(plan, seed, secs):
    rnd = random.Random(seed)
    paths = sorted(plan)
    want = {}
    stats = {"reads": 0, "bytes": 0, "problems": []}
    end = time.monotonic() + secs
    while time.monotonic() < end:
        p = rnd.choice(paths)
        if p not in want:
            with open(plan[p], "rb") as f:
                want[p] = f.read()
        w = want[p]
        off = rnd.randrange(0, len(w) + 1)
        size = rnd.choice([1, 4096, 65536, 131072 + 7, rnd.randrange(1, 1 << 20)])
        try:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                got = os.pread(fd, size, off)
            finally:
                os.close(fd)
        except OSError as e:
            stats["problems"].append(f"{p}@{off}+{size}: {e}")
            continue
        stats["reads"] += 1
        stats["bytes"] += len(got)
        if got != w[off:off + size]:
            stats["problems"].append(f"{p}@{off}+{size}: wrong bytes")
    return stats


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    print(json.dumps(run(plan, int(sys.argv[2]), float(sys.argv[3]))))
