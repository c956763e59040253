#!/usr/bin/env python3
"""Brute-force nearest neighbours over a Shardlake index through a shardfs mount.

A Shardlake storage root shows `aliases/<alias>` as a symlink to
`indexes/<version>`, and every shard `shards/shard-NNNN.sidx` gains a view
`shards/shard-NNNN/` with `ids.npy` (N u64) and `vectors.npy` (N x dims
float32, raw indexes) served straight from the shard file.

    python3 nearest.py MNT/aliases/latest K X1 X2 ...

prints the K ids nearest (euclidean) to the query vector, one
`<id>\t<squared distance>` per line, nearest first.
"""
import glob
import os
import sys

import numpy as np


def load_index(index_dir):
    """(ids, vectors) of every shard of an index version, concatenated."""
    ids, vecs = [], []
    for view in sorted(glob.glob(os.path.join(index_dir, "shards", "*.sidx"))):
        view = view[:-len(".sidx")]
        ids.append(np.load(os.path.join(view, "ids.npy"), mmap_mode="r"))
        vecs.append(np.load(os.path.join(view, "vectors.npy"), mmap_mode="r"))
    return np.concatenate(ids), np.concatenate(vecs)


def main(argv):
    if len(argv) < 4 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    ids, vecs = load_index(argv[1])
    k = int(argv[2])
    q = np.array([float(x) for x in argv[3:]], dtype=np.float32)
    if vecs.shape[1] != q.shape[0]:
        print(f"nearest.py: the index has {vecs.shape[1]} dims, the query {q.shape[0]}",
              file=sys.stderr)
        return 2
    d = ((vecs - q) ** 2).sum(axis=1)
    for i in np.argsort(d, kind="stable")[:k]:
        print(f"{int(ids[i])}\t{float(d[i]):.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
