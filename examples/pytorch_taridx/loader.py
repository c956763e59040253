#!/usr/bin/env python3
"""A PyTorch DataLoader over a .taridx fold mounted by shardfs.

Each sample is a group of tar members sharing a key (`<key>.npy`,
`<key>.cls`, ...). In the mount, the fold's view directory shows every member
at its path, and a flat `<key>.<ext>` resolves through the index without any
directory listing, so a Dataset needs only the list of keys:

    python3 loader.py MNT/train --keys keys.txt --workers 4

prints one line per sample: key, label and the SHA-256 of the tensor's bytes.
"""
import argparse
import hashlib
import os
import sys

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class FoldSamples(Dataset):
    """Samples of a mounted fold, by key: `<key>.npy` holds the tensor and
    `<key>.cls` the label as decimal text."""

    def __init__(self, fold_dir, keys):
        self.fold_dir = fold_dir
        self.keys = list(keys)

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        key = self.keys[i]
        base = os.path.join(self.fold_dir, key)
        # a plain open per member: the page cache keeps what was read, and
        # each worker process opens its own files
        x = torch.from_numpy(np.load(base + ".npy"))
        with open(base + ".cls", "rb") as f:
            label = int(f.read())
        return key, x, label


def collate(batch):
    """Keeps each sample whole: tensors of a batch may differ in shape."""
    return batch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("fold_dir", help="the fold's view directory in the mount (MNT/train)")
    p.add_argument("--keys", required=True, help="file with one sample key per line")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8)
    a = p.parse_args(argv)
    with open(a.keys) as f:
        keys = [line.strip() for line in f if line.strip()]
    loader = DataLoader(FoldSamples(a.fold_dir, keys), batch_size=a.batch_size,
                        num_workers=a.workers, collate_fn=collate)
    for batch in loader:
        for key, x, label in batch:
            digest = hashlib.sha256(x.contiguous().numpy().tobytes()).hexdigest()
            print(f"{key}\t{label}\t{tuple(x.shape)}\t{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
