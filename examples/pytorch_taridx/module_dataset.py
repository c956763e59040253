#!/usr/bin/env python3
"""map_dataset.py without a mount: a map-style PyTorch Dataset over a
.taridx fold read by the `shardfs` Python module (no FUSE, no root).

shardfs.FoldDataset opens the fold (train.taridx and its tars beside it)
and gives sample i, line i of the fold's samples.jsonl, as the members'
bytes by extension; the workers (fork or spawn) each open the fold again:

    python3 module_dataset.py /data/shards/train.taridx --workers 4 --shuffle

prints what map_dataset.py prints over a mount of the same fold: one line
per sample (index, key, then `ext=sha256` of each member's bytes, extensions
sorted) and, on stderr, the throughput.
"""
import argparse
import sys
import time

import map_dataset  # beside this file: the same decoding and output
import shardfs


def decode(sample):
    """As map_dataset.py decodes: .npy members as tensors, .cls as ints,
    the rest as bytes."""
    return sample.index, sample.key, {ext: map_dataset.decode(ext, data)
                                      for ext, data in sample.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("taridx", help="the fold's index file (train.taridx), its tars beside it")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--shuffle", action="store_true", help="random order (seed 0)")
    p.add_argument("--start", choices=("fork", "spawn"), default="fork",
                   help="how the worker processes start")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    ds = shardfs.FoldDataset(a.taridx, transform=decode)
    map_dataset.run(ds, a, time.perf_counter() - t0, f"fold opened ({a.start} workers)",
                    multiprocessing_context=a.start if a.workers else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
