"""The `python` case group (issue 29): the shardfs Python module against a
hand-written reader and native files, in one run.

random reads: the members of a small fold in random order, one call each,
through the module (View.read), through a reader that knows each member's
tar and offset (a dict built with tarfile) and calls os.pread once per
member, and from the same files extracted (open, read, close). Then the time
to open a fold of 1,000,000 members ready for fold[i]."""
import os
import random
import sys
import tarfile
import time

import data
from cases import median, row


def _module(ctx):
    sys.path.insert(0, str(ctx.build / "python"))
    import shardfs
    return shardfs


def _offsets(src):
    """{member name: (tar descriptor, offset, size)}, from the tars' own
    headers: what a loader that reads the tars itself keeps."""
    table = {}
    for tar in sorted(src.glob("*.tar")):
        fd = os.open(tar, os.O_RDONLY)
        with tarfile.open(tar) as tf:
            for m in tf:
                table[m.name] = (fd, m.offset_data, m.size)
    return table


def _pass(read, order):
    t = time.perf_counter()
    total = 0
    for name in order:
        total += len(read(name))
    return len(order) / (time.perf_counter() - t), total


def _native_read(native):
    def read(name):
        with open(native / name, "rb") as f:
            return f.read()
    return read


def random_reads(ctx):
    shardfs = _module(ctx)
    n = ctx.size(100_000, 4_000)
    src, native, _, names = data.small_fold(ctx.work, ctx.tools, n, 10)
    order = names[:]
    random.Random(29).shuffle(order)
    table = _offsets(src)

    def pread(name):
        fd, off, size = table[name]
        return os.pread(fd, size, off)

    mod, hand, nat = [], [], []
    with shardfs.open(src / "f.taridx") as v:
        for _ in range(ctx.runs):
            # alternated, each side's files warm right before it runs
            data.warm(sorted(src.glob("*.tar")))
            rate, got = _pass(v.read, order)
            mod.append(rate)
            rate, want = _pass(pread, order)
            hand.append(rate)
            if got != want:
                raise RuntimeError(f"the module read {got} bytes, os.pread {want}")
            data.warm([native / x for x in names])
            nat.append(_pass(_native_read(native), order)[0])
    for fd in {fd for fd, _, _ in table.values()}:
        os.close(fd)
    u = "files/s"
    return [
        row("python_random_reads", median(mod), u, "os.pread reader", median(hand), 0.9),
        row("python_random_reads", median(mod), u, "native", median(nat), 1.5),
        row("pread_random_reads", median(hand), u, "native", median(nat)),
    ]


def fold_open(ctx):
    """shardfs.open(f.taridx).fold() of a 1,000,000-member fold (the fold
    case's data), then fold[i] of one sample."""
    shardfs = _module(ctx)
    n = ctx.size(1_000_000, 20_000)
    src, _, _, names = data.small_fold(ctx.work, ctx.tools, n, 10, lo=16, hi=64, native=False)
    data.warm(sorted(src.glob("*")))
    times = []
    for r in range(ctx.runs):
        t = time.perf_counter()
        with shardfs.open(src / "f.taridx") as v:
            fold = v.fold()
            s = fold[random.Random(r).randrange(n)]
            times.append(time.perf_counter() - t)
            if len(fold) != n or len(s) != 1:
                raise RuntimeError(f"the fold has {len(fold)} samples of {n}")
    return [row("python_fold_open", median(times), "s", f"limit ({n} members)", 1.5, 1.0,
                "<=")]


def python_group(ctx):
    return random_reads(ctx) + fold_open(ctx)
