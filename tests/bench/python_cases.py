"""The `python` case group (issue 29): the shardfs Python module against a
hand-written reader and native files, in one run.

random reads: the members of a small fold in random order, one call each
(one view for all the runs, as a loader's epochs; the first run's figure
also apart), through the module (View.read), through a reader that knows each member's
tar and offset (a dict built with tarfile) and calls os.pread once per
member, and from the same files extracted (open, read, close). Then the time
to open a fold of 1,000,000 members ready for fold[i]. And an epoch of a
2-worker PyTorch DataLoader decoding JPEGs with a random crop, over the
module's FoldDataset, over the same files extracted, and over the fold
mounted (default options, and the loader's) read by path: images per
second and CPU per image."""
import io
import os
import random
import resource
import sys
import tarfile
import time
import zlib

import numpy as np

import data
import mounts
from cases import LOADER, PUSH, cpu_seconds, median, row


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
        # the first pass alone: each name's first read also checks its tar
        # header (later reads of the name take the row that check found)
        row("python_random_reads_first_pass", mod[0], u, "os.pread reader", hand[0]),
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


CROP = 128


def decode(jpg, cls, seed):
    """What a training loader does with a sample: the JPEG decoded, a random
    CROP x CROP piece of it as a CHW uint8 tensor, and its class. Also the
    CRC-32 of the sample's bytes, by which an epoch shows what it read."""
    import torch
    from PIL import Image
    img = Image.open(io.BytesIO(jpg))
    rng = random.Random(seed)
    x, y = rng.randrange(img.width - CROP + 1), rng.randrange(img.height - CROP + 1)
    a = np.asarray(img.crop((x, y, x + CROP, y + CROP)).convert("RGB"))
    return torch.from_numpy(a.copy()).permute(2, 0, 1), int(cls), zlib.crc32(cls, zlib.crc32(jpg))


def decode_sample(s):
    """FoldDataset's transform: a shardfs.Sample decoded as `decode` does."""
    return decode(s["jpg"], s["cls"], s.index)


class JPEGFiles:
    """The samples as files <key>.jpg and <key>.cls in `root` (the extracted
    files, or the fold's directory in a mount), as a Dataset that takes
    paths: the keys from a listing of `root` (made before the workers
    start), sample i being the i-th key sorted, as in samples.jsonl."""

    def __init__(self, root):
        self.root = root
        self.keys = sorted(n[:-4] for n in os.listdir(root) if n.endswith(".jpg"))

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        base = os.path.join(self.root, self.keys[i])
        with open(base + ".jpg", "rb") as f:
            jpg = f.read()
        with open(base + ".cls", "rb") as f:
            cls = f.read()
        return decode(jpg, cls, i)


def _cpu(daemon):
    """CPU seconds (user and system) of this process with its children
    waited for (a DataLoader's workers, joined at the epoch's end), and of
    the running `daemon` (a pid; 0 without one)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
            cpu_seconds(daemon) if daemon else 0)


def _epoch(ds, seed, daemon=None):
    """One shuffled epoch through a 2-worker DataLoader (workers started by
    fork, Linux's default): images per second, the sum of the samples'
    CRCs (every side of every round must read the same bytes), the CPU
    seconds per image of the loader's processes and the `daemon` together,
    which a busy machine sways less than the rate, and the daemon's alone."""
    import torch
    from torch.utils.data import DataLoader
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(seed))
    cpu = _cpu(daemon)
    t = time.perf_counter()
    n = crcs = 0
    for x, y, crc in loader:
        n += len(y)
        crcs += int(crc.sum())
    rate = n / (time.perf_counter() - t)
    if n != len(ds):
        raise RuntimeError(f"the epoch gave {n} samples of {len(ds)}")
    (me, fs), (me0, fs0) = _cpu(daemon), cpu
    return rate, crcs, (me - me0 + fs - fs0) / n, (fs - fs0) / n


def _files_epoch(root, keys, seed, daemon=None):
    """One epoch over a JPEGFiles of `root`, its listing checked."""
    ds = JPEGFiles(str(root))
    if ds.keys != keys:
        raise RuntimeError(f"{root} lists {len(ds.keys)} samples, not the {len(keys)} keys")
    return _epoch(ds, seed, daemon)


def dataloader_jpeg(ctx):
    """Medians of --runs rounds (3 at least; --quick one round of 64
    samples, its figures meaning nothing), each side's files warm right
    before its epoch: the module's FoldDataset (one view for every round,
    as a loader's epochs), the extracted files, and a Dataset of paths over
    the fold mounted with the default options and with the loader's (a
    fresh mount each epoch: its first pass, the Dataset's listing first).
    The sides run in the opposite order every other round: single epochs
    swing by more than the 3 % compared, and the first epoch of the process
    pays the loader's own start. Each side's CPU per image (the loader's
    processes, and the daemon's for a mount) beside its rate: on a busy
    machine the rate says how much CPU the others left, the CPU what the
    side costs."""
    shardfs = _module(ctx)
    n = ctx.size(10_000, 64)
    src, native, keys = data.jpeg_fold(ctx.work, ctx.tools, n, 4)
    mod_ds = shardfs.FoldDataset(src / "j.taridx", transform=decode_sample)
    if len(mod_ds) != n or mod_ds.fold[n - 1].key != keys[-1]:
        raise RuntimeError("the fold's samples are not the keys in order")
    tars = sorted(src.iterdir())

    def mounted(*args):
        def epoch(seed):
            with mounts.shardfs(ctx.shardfs, src, *args) as (mnt, proc, _):
                return _files_epoch(mnt / "j", keys, seed, proc.pid)
        return epoch

    sides = {"module": (tars, lambda seed: _epoch(mod_ds, seed)),
             "native": (sorted(native.iterdir()), lambda seed: _files_epoch(native, keys, seed)),
             "mount": (tars, mounted()),
             "loader": (tars, mounted(*LOADER, *PUSH))}
    rates, cpus, daemon = ({s: [] for s in sides} for _ in range(3))
    want = sum(zlib.crc32((native / f"{k}.cls").read_bytes(),
                          zlib.crc32((native / f"{k}.jpg").read_bytes())) for k in keys)
    for r in range(ctx.size(max(3, ctx.runs), 1)):
        for s in list(sides) if r % 2 == 0 else reversed(sides):
            files, epoch = sides[s]
            data.warm(files)
            rate, crc, cpu, fs = epoch(r)
            if crc != want:
                raise RuntimeError(f"the {s} epoch read other bytes than the files hold")
            rates[s].append(rate)
            cpus[s].append(cpu * 1e3)
            daemon[s].append(fs * 1e3)
    mod_ds.fold.view.close()
    nat, nat_cpu = median(rates["native"]), median(cpus["native"])
    rows = []
    for s, case in (("module", "python"), ("mount", "mount"), ("loader", "loader")):
        rows += [row(f"{case}_dataloader_jpeg", median(rates[s]), "images/s", "native files", nat,
                     0.97),
                 row(f"{case}_dataloader_jpeg_cpu", median(cpus[s]), "ms/image", "native files",
                     nat_cpu, 1.03, "<=")]
        if s != "module":
            # the daemon's share, in the CPU native files take a sample
            rows.append(row(f"{case}_dataloader_jpeg_daemon_cpu", median(daemon[s]), "ms/image",
                            "native files' CPU", nat_cpu))
    return rows


def python_group(ctx):
    return random_reads(ctx) + fold_open(ctx) + dataloader_jpeg(ctx)
