"""The benchmark cases of issue 8. Each group function measures shardfs and
its references in the same run and returns result rows (see `row`)."""
import ctypes
import json
import mmap
import multiprocessing
import os
import random
import resource
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import data
import mounts
from data import KiB, MiB, GiB

PAGE = os.sysconf("SC_PAGE_SIZE")
# /proc/kpageflags bits (Documentation/admin-guide/mm/pagemap.rst)
KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL = 1 << 15, 1 << 16


@dataclass
class Context:
    build: Path
    work: Path
    quick: bool
    runs: int

    @property
    def shardfs(self):
        return self.build / "fs" / "shardfs"

    @property
    def tools(self):
        return self.build / "tools"

    def size(self, full, quick):
        return quick if self.quick else full


def row(case, figure, unit, reference, reference_figure, target=None, op=">=", ratio=None):
    """One comparison. `ratio` is figure / reference unless given; `target`
    applies to the ratio."""
    if ratio is None and reference_figure:
        ratio = figure / reference_figure
    met = None
    if target is not None and ratio is not None:
        met = ratio >= target if op == ">=" else ratio <= target
    return dict(case=case, figure=figure, unit=unit, reference=reference,
                reference_figure=reference_figure, ratio=ratio, target=target,
                target_op=op if target is not None else None, met=met)


def median(xs):
    return statistics.median(xs)


def timed(fn, *args):
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def cpu_seconds(pid):
    """User + system CPU time of a running process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_cpu_seconds(cmd):
    """CPU time of a command run to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def stats(mnt):
    return json.loads((Path(mnt) / ".shardfs" / "stats.json").read_bytes())


# --- small members -------------------------------------------------------

def read_all(paths):
    """The loop data loaders run: open, read, close."""
    for p in paths:
        with open(p, "rb") as f:
            f.read()


def files_per_s(paths):
    return len(paths) / timed(read_all, paths)


def two_passes(root, names):
    paths = [os.path.join(root, n) for n in names]
    return files_per_s(paths), files_per_s(paths)


def _reader(root, names, barrier, out):
    barrier.wait()
    t0 = time.perf_counter()
    read_all([os.path.join(root, n) for n in names])
    out.put((t0, time.perf_counter()))


def parallel_files_per_s(root, names, readers):
    """`readers` processes read disjoint slices of `names` at once; the rate
    is all files over the time from the first start to the last finish."""
    mp = multiprocessing.get_context("fork")
    barrier, out = mp.Barrier(readers), mp.Queue()
    procs = [mp.Process(target=_reader, args=(root, names[i::readers], barrier, out))
             for i in range(readers)]
    for p in procs:
        p.start()
    spans = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"reader exited {p.exitcode}")
    return len(names) / (max(e for _, e in spans) - min(s for s, _ in spans))


def small_members(ctx):
    n = ctx.size(100_000, 4_000)
    src, native, image, names = data.small_fold(ctx.work, ctx.tools, n, 10)
    order = names[:]
    random.Random(8).shuffle(order)
    shard0 = names[:-(-n // 10)]
    in_shard0 = set(shard0)
    # archivemount is slow enough per file that a sample of its shard does
    order0 = [x for x in order if x in in_shard0][:ctx.size(500, 100)]
    # Each side's source is read into the page cache right before it is
    # measured: this machine lets cached pages go within seconds (see
    # docs/performance.md), and every reference is meant warm.
    tars = sorted(src.glob("*"))
    nat, sq1, sq2, sf1, sf2, par, ar1, ar2 = ([] for _ in range(8))
    for _ in range(ctx.runs):
        data.warm([native / x for x in names])
        nat.append(two_passes(native, order)[1])
        data.warm(tars)
        with mounts.shardfs(ctx.shardfs, src) as (mnt, _, _):
            first, second = two_passes(mnt / "f", order)
            sf1.append(first)
            sf2.append(second)
        data.warm(tars)
        with mounts.shardfs(ctx.shardfs, src) as (mnt, _, _):
            par.append(parallel_files_per_s(mnt / "f", order, 4))
        data.warm([image])
        with mounts.squashfuse_ll(image) as (mnt, _, _):
            first, second = two_passes(mnt, order)
            sq1.append(first)
            sq2.append(second)
        data.warm([src / "f_0000.tar"])
        with mounts.archivemount(src / "f_0000.tar") as (mnt, _, _):
            first, second = two_passes(mnt, order0)
            ar1.append(first)
            ar2.append(second)
    u = "files/s"
    return [
        row("small_first_pass", median(sf1), u, "native", median(nat), 0.40),
        row("small_first_pass", median(sf1), u, "squashfuse_ll first pass", median(sq1), 4.0),
        row("small_first_pass", median(sf1), u, "archivemount first pass", median(ar1)),
        row("small_second_pass", median(sf2), u, "native", median(nat), 0.80),
        row("small_second_pass", median(sf2), u, "squashfuse_ll second pass", median(sq2)),
        row("small_second_pass", median(sf2), u, "archivemount second pass", median(ar2)),
        row("parallel_4_readers", median(par), u, "1 reader first pass", median(sf1), 1.5),
    ]


# --- large payloads ------------------------------------------------------

def dd(path, skip=0, count=None):
    """Seconds for dd to read `count` bytes of `path` from `skip` in 1 MiB blocks."""
    args = ["dd", f"if={path}", "of=/dev/null", "bs=1M", "status=none"]
    if skip or count is not None:
        args += ["iflag=skip_bytes,count_bytes", f"skip={skip}"]
        args += [f"count={count}"] if count is not None else []
    t = time.perf_counter()
    subprocess.run(args, check=True)
    return time.perf_counter() - t


def large_folio_share(path, samples=4096):
    """The share of `path`'s cached pages that sit in large folios, from
    /proc/self/pagemap and /proc/kpageflags (root): sampled pages, mapped
    privately and touched (a private mapping that is not written shows the
    page cache's own pages)."""
    size = os.path.getsize(path)
    pages = size // PAGE
    step = max(1, pages // samples)
    large = seen = 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), pages * PAGE, access=mmap.ACCESS_COPY) as m, \
            open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        for i in range(0, pages, step):
            m[i * PAGE]  # maps the page
            entry = int.from_bytes(os.pread(pm.fileno(), 8, (base // PAGE + i) * 8), "little")
            pfn = entry & ((1 << 55) - 1)
            if not pfn:
                raise RuntimeError(f"{path}: /proc/self/pagemap shows no page frame (not root?)")
            flags = int.from_bytes(os.pread(kf.fileno(), 8, pfn * 8), "little")
            seen += 1
            large += bool(flags & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL))
    return large / seen


def large_payload(ctx):
    """The member read twice on a fresh mount against the tar's byte range,
    and why the ratios are what they are: the READs each read sends (the
    second none: the kernel's page cache answers), the daemon's CPU for the
    first read against a copy of the same bytes from the page cache (the
    native dd's), and how much of the member's page cache sits in large
    folios against the tar's (a FUSE file's is in 4 KiB pages on kernels
    before FUSE's large folios, docs/performance.md)."""
    size = ctx.size(1 * GiB, 32 * MiB)
    src, member, offset = data.big_member(ctx.work, ctx.tools, size)
    tar = src / "big_0000.tar"
    data.warm([tar])
    nat, first, second, nat_cpu, cpu, reads1, reads2, share = [], [], [], [], [], [], [], []
    for _ in range(ctx.runs):
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        nat.append(size / dd(tar, offset, size))
        c2 = resource.getrusage(resource.RUSAGE_CHILDREN)
        nat_cpu.append(c2.ru_utime + c2.ru_stime - c.ru_utime - c.ru_stime)
        with mounts.shardfs(ctx.shardfs, src) as (mnt, proc, _):
            path = mnt / "big" / member
            os.stat(path)
            # each stats.json read adds its own READs to the next one's
            # count (two with --open, the second finding the end past the
            # page cache; one by default, a node per snapshot): counted
            own = -stats(mnt)["requests"]["read"]
            r0 = stats(mnt)["requests"]["read"]
            own += r0
            c = schedstat_seconds(proc.pid)
            first.append(size / dd(path))
            cpu.append(schedstat_seconds(proc.pid) - c)
            r1 = stats(mnt)["requests"]["read"]
            second.append(size / dd(path))
            r2 = stats(mnt)["requests"]["read"]
            reads1.append(r1 - r0 - own)
            reads2.append(r2 - r1 - own)
            share.append(large_folio_share(path))
    tar_share = large_folio_share(tar)
    u = "MB/s"
    mb = 1e6
    return [
        row("large_first_read", median(first) / mb, u, "native byte range", median(nat) / mb, 0.60),
        row("large_second_read", median(second) / mb, u, "native byte range", median(nat) / mb,
            0.90),
        row("large_first_read_requests", median(reads1), "READs", "1 MiB READs of the member",
            size / MiB, 1.05, "<="),
        row("large_second_read_requests", median(reads2), "READs", "READs of the first read",
            median(reads1), 0.0, "<="),
        row("large_first_read_cpu", median(cpu) * GiB / size, "s/GiB",
            "native byte range dd CPU", median(nat_cpu) * GiB / size),
        row("large_page_cache_folios", median(share), "share",
            f"every page (the tar: {tar_share:.2f})", 1.0),
    ]


def sparse_holes(ctx):
    """Issue 39: a sparse member's hole reads at least as fast as stored
    bytes of the same size, both first reads through the mount (the
    kernel's cached pages of the view's files dropped before each), the
    tar in the page cache."""
    size = ctx.size(1 * GiB, 64 * MiB)
    src = data.sparse_tar(ctx.work, size)
    data.warm([src / "holes.tar"])
    hole, stored = [], []
    for _ in range(ctx.runs):
        with mounts.shardfs(ctx.shardfs, src) as (mnt, _, _):
            paths = {k: mnt / "holes" / f"{k}.bin" for k in ("hole", "stored")}
            for p in paths.values():
                os.stat(p)
            # alternated, so that load on the machine falls on both
            for k, out in (("stored", stored), ("hole", hole), ("stored", stored), ("hole", hole)):
                drop_cached(paths[k])
                out.append(size / dd(paths[k], 0, size))
    mb = 1e6
    return [row("sparse_hole_read", median(hole) / mb, "MB/s", "stored bytes, same size",
                median(stored) / mb, 1.0)]


# --- compressed parts ----------------------------------------------------

def read_in_pieces(path, piece=128 * KiB):
    with open(path, "rb", buffering=0) as f:
        while f.read(piece):
            pass


def drop_cached(path):
    """Drops the kernel's cached pages of a mounted file, so the next read
    reaches the daemon again."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def compressed_parts(ctx):
    chunks, chunk_bytes = ctx.size(32, 4), ctx.size(8 * MiB, 2 * MiB)
    src = data.zstd_tet(ctx.work, chunks, chunk_bytes)
    data.warm([src / "z.tet"])
    names = [f"0.{i}" for i in range(chunks)]
    frames = ctx.work / "frames.zst"
    with mounts.shardfs(ctx.shardfs, src) as (mnt, _, _):
        with open(frames, "wb") as f:
            for c in names:
                f.write((mnt / "z" / ".shardfs" / "tiles" / "x" / (c + ".zst")).read_bytes())
    total = chunks * chunk_bytes
    unzstd = ["zstd", "-d", "-q", "-c", str(frames)]
    mine, ref, mine_cpu, ref_cpu, once = [], [], [], [], True
    for _ in range(ctx.runs):
        ref.append(total / timed(lambda: subprocess.run(unzstd, check=True,
                                                        stdout=subprocess.DEVNULL)))
        ref_cpu.append(total / child_cpu_seconds(unzstd))
        with mounts.shardfs(ctx.shardfs, src) as (mnt, proc, _):
            paths = [mnt / "z" / "x" / c for c in names]
            for p in paths:
                os.stat(p)
            before = stats(mnt)["cache"]
            cpu = cpu_seconds(proc.pid)
            mine.append(total / timed(lambda: [read_in_pieces(p) for p in paths]))
            mine_cpu.append(total / max(cpu_seconds(proc.pid) - cpu, 1e-3))
            after = stats(mnt)["cache"]
            once &= (after["parts_decoded"] - before["parts_decoded"] == chunks and
                     after["bytes_decoded"] - before["bytes_decoded"] == total)
    frames.unlink()
    mb = 1e6
    return [
        row("zstd_decode_128k_reads", median(mine) / mb, "MB/s", "zstd -d same frames",
            median(ref) / mb, 0.70),
        # per CPU second of the daemon against zstd's: steadier on a busy machine
        row("zstd_decode_cpu", median(mine_cpu) / mb, "MB/cpu-s", "zstd -d same frames",
            median(ref_cpu) / mb, 0.70),
        row("zstd_decoded_once", 1.0 if once else 0.0, "bool", "parts_decoded == chunks", 1.0,
            1.0),
    ]


# --- mount time and memory -----------------------------------------------

def mount_and_memory(ctx):
    count = ctx.size(10_000, 300)
    src = data.many_containers(ctx.work, count)
    usable, rss, first_view = [], [], []
    for _ in range(ctx.runs):
        t0 = time.perf_counter()
        with mounts.shardfs(ctx.shardfs, src) as (mnt, proc, _):
            os.stat(mnt / "c00000.tet")
            usable.append((time.perf_counter() - t0) * 1000)
            rss.append(mounts.rss_kib(proc.pid) / KiB)
            # the view's name is looked up alone, and only its container opens
            # (docs/performance.md, levers 10 and 16)
            os.stat(mnt / "c00000" / ".zgroup")
            first_view.append((time.perf_counter() - t0) * 1000)
    # the stream decodes twice the budget, so the cache must evict
    budget = ctx.size(256 * MiB, 32 * MiB)
    chunks = 2 * budget // (8 * MiB)
    stream = data.zstd_tet(ctx.work, chunks, 8 * MiB)
    want = ctx.size(10 * GiB, 256 * MiB)
    with mounts.shardfs(ctx.shardfs, stream, "--cache-size", str(budget)) as (mnt, proc, _):
        paths = [mnt / "z" / "x" / f"0.{i}" for i in range(chunks)]
        done = 0
        while done < want:
            for p in paths:
                read_in_pieces(p)
                drop_cached(p)
                done += 8 * MiB
        decoded = stats(mnt)["cache"]["bytes_decoded"]
        peak = mounts.rss_kib(proc.pid, "VmHWM") / KiB
    if decoded < want:
        raise RuntimeError(f"only {decoded} bytes decoded of {want}: reads did not reach the daemon")
    return [
        row("mount_usable", median(usable), "ms", f"limit ({count} containers)", 300.0, 1.0, "<="),
        row("rss_before_use", median(rss), "MiB", "limit", 30.0, 1.0, "<="),
        row("mount_first_view", median(first_view), "ms", f"limit ({count} containers)", 300.0,
            1.0, "<="),
        row("rss_after_stream", peak, "MiB", f"budget+64 MiB ({decoded / GiB:.1f} GiB decoded)",
            (budget + 64 * MiB) / MiB, 1.0, "<="),
    ]


# --- fold scale ----------------------------------------------------------

def drop_kernel_entries():
    """The kernel forgets its dentries and inodes (FORGETs reach the daemon)."""
    subprocess.run(["sync"])
    Path("/proc/sys/vm/drop_caches").write_text("2")
    time.sleep(2)


def fold_find(ctx, n, shards):
    """find of an n-member fold: (first lookup s, find s, peak RSS MiB, RSS
    MiB after the kernel forgets), medians over the runs."""
    src, _, _, names = data.small_fold(ctx.work, ctx.tools, n, shards, lo=16, hi=64,
                                       native=False)
    data.warm(sorted(src.glob("*")))
    probe = names[random.Random(2).randrange(n)]
    lookup, listing, peak, left = [], [], [], []
    for _ in range(ctx.runs):
        t0 = time.perf_counter()
        with mounts.shardfs(ctx.shardfs, src) as (mnt, _, _):
            os.stat(mnt / "f" / probe)
            lookup.append(time.perf_counter() - t0)
        with mounts.shardfs(ctx.shardfs, src) as (mnt, proc, _):
            t = time.perf_counter()
            out = subprocess.run(f"find '{mnt}/f' | wc -l", shell=True, check=True,
                                 capture_output=True, text=True).stdout
            listing.append(time.perf_counter() - t)
            if int(out) != n + 1:
                raise RuntimeError(f"find listed {int(out) - 1} members of {n}")
            peak.append(mounts.rss_kib(proc.pid, "VmHWM") / KiB)
            drop_kernel_entries()
            left.append(mounts.rss_kib(proc.pid) / KiB)
    return median(lookup), median(listing), median(peak), median(left)


def fold_scale(ctx):
    n = ctx.size(1_000_000, 20_000)
    lookup, listing, peak, left = fold_find(ctx, n, 10)
    return [
        row("fold_first_lookup", lookup, "s", f"limit ({n} members)", 1.5, 1.0, "<="),
        row("fold_find_all", listing, "s", f"limit ({n} members)", 5.0, 1.0, "<="),
        row("fold_find_peak_rss", peak, "MiB", f"limit ({n} members)", 150.0, 1.0, "<="),
        row("fold_rss_after_forget", left, "MiB", f"limit ({n} members)", 64.0, 1.0, "<="),
    ]


def fold_10m(ctx):
    """A fold ten times the fold case, in 100 tars: its find may take at
    most 12 times as long as the smaller one's, measured in the same run."""
    small, big = ctx.size(1_000_000, 10_000), ctx.size(10_000_000, 100_000)
    _, small_find, _, _ = fold_find(ctx, small, 10)
    lookup, listing, peak, _ = fold_find(ctx, big, 100)
    return [
        row("fold10m_first_lookup", lookup, "s", f"limit ({big} members)", 1.5, 1.0, "<="),
        row("fold10m_find_all", listing, "s", f"find of {small} members", small_find, 12.0,
            "<="),
        row("fold10m_find_peak_rss", peak, "MiB", f"limit ({big} members)", 1536.0, 1.0, "<="),
    ]


def containers_listing(ctx):
    """ls of a directory of containers costs a header check each; find
    enters (opens) every view."""
    out = []
    for count, ms, mib in ((ctx.size(10_000, 300), 100.0, 25.0),
                           (ctx.size(100_000, 3_000), 1000.0, 150.0)):
        src = data.many_containers(ctx.work, count)
        times, rss = [], []
        for _ in range(ctx.runs):
            # the containers' pages in the page cache, as after any recent
            # use (this VM lets cold pages go within seconds)
            data.warm(sorted(src.iterdir()))
            with mounts.shardfs(ctx.shardfs, src) as (mnt, proc, _):
                os.stat(mnt / ".shardfs")
                times.append(timed(lambda: subprocess.run(["ls", str(mnt)], check=True,
                                                          stdout=subprocess.DEVNULL)) * 1000)
                rss.append(mounts.rss_kib(proc.pid) / KiB)
        out += [row(f"containers_ls_{count}", median(times), "ms", "limit", ms, 1.0, "<="),
                row(f"containers_ls_{count}_rss", median(rss), "MiB", "limit", mib, 1.0, "<=")]
    src = data.many_containers(ctx.work, ctx.size(10_000, 300))
    peak = []
    for _ in range(ctx.runs):
        with mounts.shardfs(ctx.shardfs, src) as (mnt, proc, _):
            subprocess.run(["find", str(mnt)], stdout=subprocess.DEVNULL, check=True)
            peak.append(mounts.rss_kib(proc.pid, "VmHWM") / KiB)
    out.append(row("containers_find_peak_rss", median(peak), "MiB", "limit", 64.0, 1.0, "<="))
    return out


# --- what polling costs ---------------------------------------------------

def _daemon_cpu(ctx, src, names, *args):
    """Share of a CPU the daemon uses idle, and under a trickle of lookups
    about 0.5 ms apart (a slow consumer): (idle, trickle, lookups/s)."""
    with mounts.shardfs(ctx.shardfs, src, *args) as (mnt, proc, _):
        fold = mnt / "f"
        os.stat(fold / names[0])
        time.sleep(1.5)  # past the loop's idle time
        c, t = cpu_seconds(proc.pid), time.perf_counter()
        time.sleep(2)
        idle = (cpu_seconds(proc.pid) - c) / (time.perf_counter() - t)
        c, t = cpu_seconds(proc.pid), time.perf_counter()
        for n in names[1:]:
            os.stat(fold / n)
            time.sleep(0.0005)
        dt = time.perf_counter() - t
        return idle, (cpu_seconds(proc.pid) - c) / dt, (len(names) - 1) / dt


def polling_cost(ctx):
    n = ctx.size(100_000, 4_000)
    src, _, _, names = data.small_fold(ctx.work, ctx.tools, n, 10)
    sample = names[:3000]  # about 2 s of trickle, enough CPU ticks to count
    idle, trickle, rate, off = [], [], [], []
    for _ in range(ctx.runs):
        i, t, r = _daemon_cpu(ctx, src, sample)
        idle.append(i * 100)
        trickle.append(t * 100)
        rate.append(r)
        off.append(_daemon_cpu(ctx, src, sample, "--spin-us", "0")[1] * 100)
    u = "% of CPU"
    return [
        row("daemon_cpu_idle", median(idle), u, "limit", 1.0, 1.0, "<="),
        row("daemon_cpu_trickle", median(trickle), u,
            f"--spin-us 0 ({median(rate):.0f} lookups/s)", median(off)),
    ]


# --- the transport: FUSE over io_uring against /dev/fuse -----------------

def transport_ab(ctx):
    """Both transports on the same build, alternated run by run (the order
    reversed every other run), medians: the small-file passes and four
    readers, a large first read, and the idle daemon's CPU. io_uring needs
    the kernel's switch, turned on for this group and put back (root)."""
    n = ctx.size(10_000, 2_000)
    src, native, _, names = data.small_fold(ctx.work, ctx.tools, n, 10)
    order = names[:]
    random.Random(8).shuffle(order)
    size = ctx.size(1 * GiB, 32 * MiB)
    bsrc, member, _ = data.big_member(ctx.work, ctx.tools, size)
    tars = sorted(src.glob("*"))
    modes = {"io_uring": ["--io-uring", "on"], "dev_fuse": ["--io-uring", "off"],
             "dev_fuse_nospin": ["--io-uring", "off", "--spin-us", "0"]}
    fig = {k: {m: [] for m in modes} for k in ("first", "second", "par", "large", "idle")}
    nat = []
    with mounts.uring_switch(True):
        for run in range(ctx.runs):
            data.warm([native / x for x in names])
            nat.append(two_passes(native, order)[1])
            seq = list(modes) if run % 2 == 0 else list(reversed(modes))
            for m in seq:
                data.warm(tars)
                with mounts.shardfs(ctx.shardfs, src, *modes[m]) as (mnt, proc, _):
                    if stats(mnt)["transport"] != m.split("_nospin")[0]:
                        raise RuntimeError(f"{m}: the mount runs {stats(mnt)['transport']}")
                    first, second = two_passes(mnt / "f", order)
                    fig["first"][m].append(first)
                    fig["second"][m].append(second)
                    time.sleep(1.5)  # past the loop's idle time
                    c, t = cpu_seconds(proc.pid), time.perf_counter()
                    time.sleep(4)
                    fig["idle"][m].append((cpu_seconds(proc.pid) - c) / (time.perf_counter() - t))
                data.warm(tars)
                with mounts.shardfs(ctx.shardfs, src, *modes[m]) as (mnt, _, _):
                    fig["par"][m].append(parallel_files_per_s(mnt / "f", order, 4))
                data.warm([bsrc / "big_0000.tar"])
                with mounts.shardfs(ctx.shardfs, bsrc, *modes[m]) as (mnt, _, _):
                    path = mnt / "big" / member
                    os.stat(path)
                    fig["large"][m].append(size / dd(path))
    med = {k: {m: median(v) for m, v in d.items()} for k, d in fig.items()}
    u, mb = "files/s", 1e6
    # CPU use is counted in clock ticks: one tick in the 4 s window
    tick = 100 / os.sysconf("SC_CLK_TCK") / 4
    return [
        row("uring_small_first_pass", med["first"]["io_uring"], u, "/dev/fuse first pass",
            med["first"]["dev_fuse"], 2.0),
        row("uring_small_first_pass", med["first"]["io_uring"], u,
            "/dev/fuse --spin-us 0 first pass", med["first"]["dev_fuse_nospin"]),
        row("uring_small_first_pass", med["first"]["io_uring"], u, "native", median(nat), 0.40),
        row("dev_small_first_pass", med["first"]["dev_fuse"], u, "native", median(nat)),
        row("uring_small_second_pass", med["second"]["io_uring"], u, "native", median(nat), 0.80),
        row("dev_small_second_pass", med["second"]["dev_fuse"], u, "native", median(nat)),
        row("uring_parallel_4_readers", med["par"]["io_uring"], u, "io_uring 1 reader first pass",
            med["first"]["io_uring"], 1.8),
        row("dev_parallel_4_readers", med["par"]["dev_fuse"], u, "/dev/fuse 1 reader first pass",
            med["first"]["dev_fuse"]),
        row("uring_large_first_read", med["large"]["io_uring"] / mb, "MB/s",
            "/dev/fuse large first read", med["large"]["dev_fuse"] / mb, 1.0),
        row("uring_daemon_cpu_idle", med["idle"]["io_uring"] * 100, "% of CPU",
            "limit (1 clock tick in 4 s)", tick, 1.0, "<="),
        row("dev_daemon_cpu_idle", med["idle"]["dev_fuse"] * 100, "% of CPU",
            "limit (1 clock tick in 4 s)", tick, 1.0, "<="),
    ]


# --- opens the kernel answers (the default) against --open ---------------

def os_read_all(paths):
    """The loop of C tools and numpy.fromfile: os.open, os.read, os.close
    (no isatty, so no IOCTL)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        while os.read(fd, 1 << 20):
            pass
        os.close(fd)


READERS = {"os": os_read_all, "open": read_all}
# the options for a loader that lists a directory before it reads the files
# (docs/options.md): attributes with the listing (opens the kernel answers
# by default)
LOADER = ["--readdirplus", "always"]
PUSH = ["--push-ahead", "256M"]
# the requests a file's open and read may cost
PER_FILE = ("lookup", "getattr", "open", "ioctl", "read", "flush", "release")


def schedstat_seconds(pid):
    """CPU time of a running process so far, all its threads, in ns steps
    (/proc/PID/task/*/schedstat: clock ticks would round a pass to 0)."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def _pass(mnt, proc, reader, paths):
    """One pass: (files/s, daemon CPU µs per file, requests per file by kind
    less the stats.json reads that count them)."""
    before = stats(mnt)["requests"]
    c = schedstat_seconds(proc.pid)
    t = timed(reader, paths)
    cpu = schedstat_seconds(proc.pid) - c
    after = stats(mnt)["requests"]
    reqs = {k: after[k] - before[k] for k in PER_FILE}
    # the stats.json read: its lookup (entry timeout 0) and READ, and with
    # --open its OPEN, FLUSH and RELEASE
    for k in ("lookup", "read", "open", "flush", "release"):
        reqs[k] = max(reqs[k] - 1, 0)
    return len(paths) / t, cpu / len(paths) * 1e6, {k: v / len(paths) for k, v in reqs.items()}


def no_open_ab(ctx):
    """The default mount (no-open) against --open and against the options
    for a loader (--readdirplus always) over one fold, alternated run by
    run (order reversed every other run), a fresh mount for each reader:
    files/s of both passes against native files (warm), the daemon's CPU
    per file (all its threads, /proc/PID/task/*/schedstat) and the FUSE
    requests per file of each pass, for os.open/os.read and Python's
    open(). The default and loader mounts run over FUSE io_uring too, in
    the same rounds, each against its /dev/fuse twin: the figures that chose
    the default transport (docs/performance.md). The loader's options with
    --push-ahead too (its first pass starts right after the listing, racing
    the push). And in each mode, on another fresh mount, two reader
    processes with open() (the `small` group's parallel readers), each half
    the files after the listing, against two native readers. io_uring needs
    the kernel's switch, turned on for this group and put back (root)."""
    n = ctx.size(10_000, 2_000)
    src, native, _, names = data.small_fold(ctx.work, ctx.tools, n, 10)
    order = names[:]
    random.Random(8).shuffle(order)
    tars = sorted(src.glob("*"))
    # the transport named in every mode: the kernel's switch is on here,
    # under which `auto` would be io_uring
    modes = {"default": ["--io-uring", "off"], "open": ["--io-uring", "off", "--open"],
             "loader": ["--io-uring", "off", *LOADER], "uring": ["--io-uring", "on"],
             "loader_uring": ["--io-uring", "on", *LOADER],
             "loader_push": ["--io-uring", "off", *LOADER, *PUSH]}
    # whose files/s each mode is measured against: the default mount, or for
    # io_uring the same options over /dev/fuse (its CPU and requests against
    # the default mount, whose are never 0)
    base = {"open": "default", "loader": "default", "uring": "default",
            "loader_uring": "loader", "loader_push": "loader"}
    keys = [(r, m, p) for r in READERS for m in modes for p in (1, 2)]
    fig, cpu, reqs = ({k: [] for k in keys} for _ in range(3))
    nat = {r: [] for r in READERS}
    par = {m: [] for m in modes}
    nat_par = []
    with mounts.uring_switch(True):
        for run in range(ctx.runs):
            data.warm([native / x for x in names])
            for r, fn in READERS.items():
                nat[r].append(len(order) / timed(fn, [native / x for x in order]))
            nat_par.append(parallel_files_per_s(native, order, 2))
            seq = list(modes) if run % 2 == 0 else list(reversed(modes))
            for m in seq:
                for r, fn in READERS.items():
                    data.warm(tars)
                    with mounts.shardfs(ctx.shardfs, src, *modes[m]) as (mnt, proc, _):
                        # the live file's first open (ENOSYS but with --open)
                        transport = stats(mnt)["transport"]
                        if transport != ("io_uring" if "uring" in m else "dev_fuse"):
                            raise RuntimeError(f"{m}: the mount runs {transport}")
                        os.listdir(mnt / "f")
                        paths = [mnt / "f" / x for x in order]
                        for p in (1, 2):
                            f, c, q = _pass(mnt, proc, fn, paths)
                            fig[r, m, p].append(f)
                            cpu[r, m, p].append(c)
                            reqs[r, m, p].append(q)
                # two reader processes with open(), each half the files,
                # a first pass after the listing
                data.warm(tars)
                with mounts.shardfs(ctx.shardfs, src, *modes[m]) as (mnt, proc, _):
                    os.listdir(mnt / "f")
                    par[m].append(parallel_files_per_s(mnt / "f", order, 2))
    rows = [row(f"{m}_open_2_readers", median(par[m]), "files/s", "2 native readers",
                median(nat_par), 0.5) for m in modes]
    for r in READERS:
        for p in (1, 2):
            label = f"{r}_{'first' if p == 1 else 'second'}_pass"
            for m in modes:
                rows.append(row(f"{m}_{label}", median(fig[r, m, p]), "files/s", f"native {r}",
                                median(nat[r])))
            # requests per file by kind, the last run's (they do not vary)
            q = {m: reqs[r, m, p][-1] for m in modes}
            kinds = {m: " ".join(f"{k}={v:.2f}" for k, v in q[m].items() if v >= 0.005) or "none"
                     for m in modes}
            for m, b in base.items():
                rows.append(row(f"{m}_{label}", median(fig[r, m, p]), "files/s",
                                f"{b} mount", median(fig[r, b, p])))
                # the goal for /dev/fuse's options past the default: half
                # the daemon's CPU (--open is the one short of it)
                rows.append(row(f"{m}_{label}_cpu", median(cpu[r, m, p]), "us/file",
                                "default mount", median(cpu[r, "default", p]),
                                None if "uring" in m or m == "open" else 0.5, "<="))
                rows.append(row(f"{m}_{label}_requests", sum(q[m].values()), "per file",
                                f"default mount ({kinds['default']}; {m}: {kinds[m]})",
                                sum(q["default"].values())))
    return rows


# --- tet views opened by xarray ----------------------------------------------

def tet_xarray_open(ctx):
    """xr.open_zarr of one group of a view of 1,000 datasets in 10 groups:
    with the view's consolidated metadata against zarr reading every
    .zarray/.zattrs on its own. Counts the daemon's open requests (one of
    them is the stats.json read that takes the count), so it mounts with
    --open, and times the open."""
    import warnings

    import xarray as xr
    n, groups = 1000, 10
    src = data.many_datasets_tet(ctx.work, n, groups)
    data.warm([src / "many.tet"])
    fig = {True: [], False: []}
    opens = {True: [], False: []}
    for _ in range(ctx.runs):
        for consolidated in (True, False):
            with mounts.shardfs(ctx.shardfs, src, "--open") as (mnt, _, _):
                os.stat(mnt / "many" / "grp3")
                before = stats(mnt)["requests"]["open"]
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    t = timed(lambda: xr.open_zarr(mnt / "many", group="grp3",
                                                   consolidated=consolidated))
                opens[consolidated].append(stats(mnt)["requests"]["open"] - before - 1)
                fig[consolidated].append(t * 1e3)
    return [
        row("tet_xr_open_files", max(opens[True]), "opens", "every .zarray/.zattrs",
            median(opens[False]), 1.0, "<=", ratio=max(opens[True])),
        row("tet_xr_open_time", median(fig[True]), "ms", "consolidated=False",
            median(fig[False]), 0.5, "<="),
    ]


# --- compressed tars (issue 42) --------------------------------------------

# Each format's decompressor, as its users run it: the whole archive, and
# single-threaded (the throughput a large member's read is held to)
ZTAR_TOOLS = {"gzip": (["gzip", "-dc"], ["gzip", "-dc"]),
              "pigz": (["pigz", "-dc"], ["gzip", "-dc"]),
              "zstd": (["zstd", "-dc"], ["zstd", "-dc"]),
              "xz": (["xz", "-T2", "-dc"], ["xz", "-T1", "-dc"]),
              "pbzip2": (["pbzip2", "-p2", "-dc"], ["bzip2", "-dc"]),
              "lz4": (["lz4", "-dc"], ["lz4", "-dc"])}


def decompress_seconds(cmd, archive):
    t = time.perf_counter()
    subprocess.run([*cmd, str(archive)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def read_member(path, size):
    """Milliseconds to open and read a member whole; its length checked."""
    t = time.perf_counter()
    with open(path, "rb") as f:
        n = len(f.read())
    ms = (time.perf_counter() - t) * 1e3
    if n != size:
        raise RuntimeError(f"{path}: read {n} bytes, the tar says {size}")
    return ms


def spread(offsets, rng, gap=16 * MiB):
    """Members whose data lie `gap` bytes apart at least in the tar, in a
    shuffled order: each in a stretch of start points (at most 16 MiB at
    the bench's sizes) no other of them is in, so that no read of them
    finds pieces or a decoder another one left."""
    out, at = [], -gap
    for n, off in sorted(offsets.items(), key=lambda x: x[1]):
        if off - at >= gap and n != "large.bin":
            out.append(n)
            at = off
    rng.shuffle(out)
    return out


def copy_target():
    """An empty directory in memory (/dev/shm where there is one), so that
    copies of the tar's 234 MB time the reading, not the disk."""
    return Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))


def extract_seconds(cmd, archive):
    """The decompressor piped into `tar -x`: what extracting costs."""
    out = copy_target()
    try:
        t = time.perf_counter()
        dc = subprocess.Popen([*cmd, str(archive)], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(out)], stdin=dc.stdout, check=True)
        dc.stdout.close()
        if dc.wait() != 0:
            raise RuntimeError(f"{cmd[0]} of {archive} exited {dc.returncode}")
        return time.perf_counter() - t
    finally:
        shutil.rmtree(out)


def _ztar_shardfs(ctx, archive, idx, view, sizes, sample, cold):
    """One format's shardfs side, each figure from the daemon's start or the
    first lookup, so that work a lookup does is counted: the first member's
    read on a first mount with an empty --index-dir (the mount, the pass
    over the archive, the read); on a second mount that reads the kept
    index, the first member's read again, then the members of `sample` in
    turn (ms each); on a third, the members of `cold` (ms each); on a
    fourth, the large member's lookup and read in 1 MiB pieces; on a fifth,
    `cp -r` of the view (which lists it, then reads its files in the
    order of their inode numbers). The archive is read into the page cache
    before each mount, as before the tool's runs (this VM drops pages
    unused for seconds). Returns (first s, kept first s, [ms], [cold ms],
    large s, copy s)."""
    shutil.rmtree(idx, ignore_errors=True)
    idx.mkdir()
    src = archive.parent
    first = next(iter(sizes))
    with mounts.shardfs(ctx.shardfs, src, "--index-dir", str(idx)) as (mnt, _, up):
        first_s = up + read_member(mnt / view / first, sizes[first]) / 1e3
    data.warm([archive])
    with mounts.shardfs(ctx.shardfs, src, "--index-dir", str(idx)) as (mnt, _, up):
        kept_s = up + read_member(mnt / view / first, sizes[first]) / 1e3
        ms = [read_member(mnt / view / n, sizes[n]) for n in sample]
        kept = json.loads((mnt / view / ".shardfs" / "info.json").read_bytes())["compression"]
        if kept["kept"] != "read from --index-dir":
            raise RuntimeError(f"{src}: the second mount did not read the kept index: {kept}")
    data.warm([archive])
    with mounts.shardfs(ctx.shardfs, src, "--index-dir", str(idx)) as (mnt, _, _):
        cold_ms = [read_member(mnt / view / n, sizes[n]) for n in cold]
    data.warm([archive])
    with mounts.shardfs(ctx.shardfs, src, "--index-dir", str(idx)) as (mnt, _, _):
        t = time.perf_counter()
        os.stat(mnt / view / "large.bin")
        read_in_pieces(mnt / view / "large.bin", MiB)
        large_s = time.perf_counter() - t
    data.warm([archive])
    out = copy_target()
    try:
        with mounts.shardfs(ctx.shardfs, src, "--index-dir", str(idx)) as (mnt, _, up):
            t = time.perf_counter()
            subprocess.run(["cp", "-r", f"{mnt / view}/.", str(out)], check=True)
            copy_s = up + time.perf_counter() - t
        if (out / "large.bin").stat().st_size != sizes["large.bin"]:
            raise RuntimeError(f"{src}: cp -r copied large.bin short")
    finally:
        shutil.rmtree(out)
    return first_s, kept_s, ms, cold_ms, large_s, copy_s


def compressed_tars(ctx):
    """Each format's archive of the same tar (data.compressed_tars), both
    sides alternated run by run and the archive in the page cache before
    each: the first member on a first mount, and on a mount with the index
    kept, against the decompressor reading the whole archive; random
    members with the index kept (the median of each run's medians), and
    members 16 MiB apart at least, each the first read of its stretch on a
    mount of its own (`_cold`); the large member looked up and read in 1 MiB pieces against the
    single-threaded decompressor's rate over the archive; `cp -r` of the
    view against the decompressor piped into `tar -x` (both into memory);
    archivemount's random reads of the gzip archive."""
    members, large = ctx.size(2_000, 50), ctx.size(64 * MiB, 2 * MiB)
    d, srcs, sizes, tar_size = data.compressed_tars(ctx.work, members, large)
    with tarfile.open(d / "z.tar") as t:
        offsets = {m.name: m.offset_data for m in t.getmembers()}
    rng = random.Random(42)
    small = [n for n in sizes if n != "large.bin"]
    fig = {f: {k: [] for k in ("first", "kept", "dc", "random", "cold", "large", "st",
                               "copy", "x")}
           for f in srcs}
    am = []
    for run in range(ctx.runs):
        for f, (src, name) in srcs.items():
            archive, view = src / name, name.split(".")[0]
            dc, st = ZTAR_TOOLS[f]
            sample = rng.sample(small, ctx.size(50, 10))
            sides = ["shardfs", "tool"] if run % 2 == 0 else ["tool", "shardfs"]
            for side in sides:
                data.warm([archive])
                if side == "tool":
                    fig[f]["dc"].append(decompress_seconds(dc, archive))
                    data.warm([archive])
                    fig[f]["st"].append(tar_size / decompress_seconds(st, archive))
                    data.warm([archive])
                    fig[f]["x"].append(extract_seconds(dc, archive))
                    continue
                first, kept, ms, cold, large_s, copy_s = _ztar_shardfs(
                    ctx, archive, d / f"idx-{f}", view, sizes, sample, spread(offsets, rng))
                fig[f]["first"].append(first)
                fig[f]["kept"].append(kept)
                fig[f]["random"].append(median(ms))
                fig[f]["cold"].append(median(cold))
                fig[f]["large"].append(large / large_s)
                fig[f]["copy"].append(copy_s)
        # archivemount decodes from the archive's start for every member:
        # a few members a run
        src, name = srcs["gzip"]
        data.warm([src / name])
        with mounts.archivemount(src / name) as (mnt, _, _):
            am.append(median([read_member(mnt / n, sizes[n])
                              for n in rng.sample(small, ctx.size(10, 3))]))
    med = {f: {k: median(v) for k, v in x.items()} for f, x in fig.items()}
    mb = 1e6
    rows = []
    for f in srcs:
        dc, st = (" ".join(c) for c in ZTAR_TOOLS[f])
        m = med[f]
        gz = srcs[f][1].endswith(".gz")
        rows += [
            row(f"ztar_{f}_first_member", m["first"], "s", f"`{dc}` of the archive", m["dc"],
                1.2 if gz else None, "<="),
            row(f"ztar_{f}_kept_first_member", m["kept"], "s", f"`{dc}` of the archive", m["dc"]),
            row(f"ztar_{f}_random_read", m["random"], "ms", "limit", 50.0, 1.0, "<="),
            row(f"ztar_{f}_random_read_cold", m["cold"], "ms", "limit", 50.0),
            row(f"ztar_{f}_large_read", m["large"] / mb, "MB/s", f"`{st}` rate", m["st"] / mb,
                0.8),
            row(f"ztar_{f}_copy", m["copy"], "s", f"`{dc} | tar -x`", m["x"]),
        ]
        if f == "gzip":
            rows.append(row("ztar_gzip_random_read", m["random"], "ms",
                            "archivemount random read", median(am)))
    return rows


from python_cases import python_group  # noqa: E402  (it imports this module)

GROUPS = {
    "small": small_members,
    "large": large_payload,
    "holes": sparse_holes,
    "zstd": compressed_parts,
    "mount": mount_and_memory,
    "fold": fold_scale,
    "fold10m": fold_10m,
    "containers": containers_listing,
    "cpu": polling_cost,
    "transport": transport_ab,
    "open": no_open_ab,
    "tetopen": tet_xarray_open,
    "python": python_group,
    "ztar": compressed_tars,
}
