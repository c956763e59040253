#!/usr/bin/env python3
"""Reads a .tet tensor file through a shardfs mount with zarr and numpy.

The view directory of `weights.tet` is a zarr v2 group: every dataset is a
zarr array (uncompressed chunks decoded by shardfs), and `<dataset>.npy`
beside it is the whole array for numpy.

    python3 read_tet.py MNT/weights

prints, per dataset, one JSON line: its path in the group, shape, dtype, the
SHA-256 of the array's C-order bytes as zarr reads it, whether the .npy twin
(memory-mapped) holds the same values, and the zarr attributes.
"""
import hashlib
import json
import os
import sys

import numpy as np
import zarr


def arrays(group, prefix=""):
    """(path, zarr array) of every array in the group, depth first."""
    for name, item in sorted(group.items()):
        path = prefix + name
        if isinstance(item, zarr.Array):
            yield path, item
        else:
            yield from arrays(item, path + "/")


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    view = argv[1]
    group = zarr.open_group(zarr.DirectoryStore(view), mode="r")
    for path, arr in arrays(group):
        data = arr[...]
        twin = np.load(os.path.join(view, path + ".npy"), mmap_mode="r")
        print(json.dumps({
            "dataset": path,
            "shape": list(arr.shape),
            "dtype": arr.dtype.str,
            "sha256": hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest(),
            "npy_equal": bool(twin.shape == data.shape and twin.dtype == data.dtype
                              and np.array_equal(twin, data, equal_nan=data.dtype.kind == "f")),
            "attrs": dict(arr.attrs),
        }, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
