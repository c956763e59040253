#!/usr/bin/env python3
"""A map-style PyTorch Dataset over a .taridx fold mounted by shardfs.

The fold's view lists its samples in `.shardfs/samples.jsonl`, one JSON line
per sample, line i being sample i:

    {"i": 0, "key": "img002", "members": {"npy": "img002.npy", "cls": "img002.cls"}}

so `len()` and `dataset[i]` need neither a directory listing nor a key list:

    python3 map_dataset.py MNT/train --workers 4 --shuffle

prints one line per sample (index, key, then `ext=sha256` of each member's
bytes, extensions sorted) and, on stderr, the throughput.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class FoldSamples(Dataset):
    """Sample i of a mounted fold, by line i of its samples.jsonl.

    One sequential pass finds where each line starts (8 bytes per sample);
    a lookup then reads just its line. The array is shared with the worker
    processes, which each open the file themselves."""

    def __init__(self, fold_dir):
        self.fold_dir = fold_dir
        self.index_path = os.path.join(fold_dir, ".shardfs", "samples.jsonl")
        starts = [np.zeros(1, dtype=np.int64)]
        at = 0
        with open(self.index_path, "rb") as f:
            while True:
                block = f.read(1 << 22)
                if not block:
                    break
                nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 0x0A)
                starts.append(nl.astype(np.int64) + at + 1)
                at += len(block)
        self.starts = np.concatenate(starts)  # n + 1 offsets: the last is the size
        self.file = None

    def __len__(self):
        return len(self.starts) - 1

    def line(self, i):
        if self.file is None:  # one handle per worker process
            self.file = open(self.index_path, "rb")
        self.file.seek(int(self.starts[i]))
        return json.loads(self.file.read(int(self.starts[i + 1] - self.starts[i])))

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        s = self.line(i)
        members = {}
        for ext, path in s["members"].items():
            with open(os.path.join(self.fold_dir, path), "rb") as f:
                members[ext] = decode(ext, f.read())
        return s["i"], s["key"], members


def decode(ext, data):
    """A member by its extension: .npy as a tensor, .cls as an int, the
    rest as bytes."""
    if ext.lower() == "npy":
        return torch.from_numpy(np.load(io.BytesIO(data)))
    if ext.lower() == "cls":
        return int(data)
    return data


def member_bytes(v):
    if isinstance(v, torch.Tensor):
        return v.contiguous().numpy().tobytes()
    if isinstance(v, int):
        return str(v).encode()
    return v


def print_samples(loader):
    """One line per sample: index, key, `ext=sha256` of each member (sorted
    by extension). Returns the number of samples and of bytes."""
    n = nbytes = 0
    for batch in loader:
        for i, key, members in batch:
            parts = []
            for ext in sorted(members):
                b = member_bytes(members[ext])
                nbytes += len(b)
                parts.append(f"{ext}={hashlib.sha256(b).hexdigest()}")
            print(f"{i}\t{key}\t{' '.join(parts)}")
            n += 1
    return n, nbytes


def collate(batch):
    """Keeps each sample whole: members differ from sample to sample."""
    return batch


def run(ds, a, opened_s, what, **loader_args):
    """Reads the whole dataset `ds` through a DataLoader as the command line
    `a` asks, prints each sample, and the throughput on stderr."""
    t1 = time.perf_counter()
    loader = DataLoader(ds, batch_size=a.batch_size, num_workers=a.workers, shuffle=a.shuffle,
                        generator=torch.Generator().manual_seed(0), collate_fn=collate,
                        **loader_args)
    n, nbytes = print_samples(loader)
    t2 = time.perf_counter()
    print(f"throughput: {n} samples ({nbytes / 1e6:.2f} MB) in {t2 - t1:.2f} s with "
          f"{a.workers} workers: {n / (t2 - t1):.0f} samples/s, {nbytes / 1e6 / (t2 - t1):.1f} MB/s; "
          f"{what} of {len(ds)} samples in {opened_s:.3f} s", file=sys.stderr)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("fold_dir", help="the fold's view directory in the mount (MNT/train)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--shuffle", action="store_true", help="random order (seed 0)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    ds = FoldSamples(a.fold_dir)
    run(ds, a, time.perf_counter() - t0, "index read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
