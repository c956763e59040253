#!/usr/bin/env python3
"""Reads a .tet tensor file through a shardfs mount with xarray, zarr and numpy.

The view directory of `weights.tet` is a zarr v2 group with consolidated
metadata: a dataset named `layer/w` is the array `w` in the group `layer`,
its footer dimension names and coordinate labels are xarray dimensions and
coordinates, and `<dataset>.npy` beside each array is the whole array for
numpy.

    python3 read_tet.py MNT/weights

opens every group of the view with `xarray.open_zarr` (one metadata read per
group, warnings treated as errors) and prints, per dataset, one JSON line:
its path in the view, shape, dtype, dimensions, coordinate labels, the
SHA-256 of the array's C-order bytes as xarray reads it, whether the .npy
twin (memory-mapped) holds the same values, and the attributes.
"""
import hashlib
import json
import os
import sys
import warnings

import numpy as np
import xarray as xr
import zarr


def groups(group, prefix=""):
    """The path of every group under `group`, itself first."""
    yield prefix
    for name, sub in sorted(group.groups()):
        yield from groups(sub, prefix + name + "/")


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    view = argv[1]
    warnings.simplefilter("error")
    root = zarr.open_consolidated(view, mode="r")
    for prefix in groups(root):
        ds = xr.open_zarr(view, group=prefix.rstrip("/") or None)
        arrays = {name for name, _ in root[prefix or "/"].arrays()}
        for name in sorted(arrays - set(ds.indexes)):
            var = ds[name]
            data = var.values
            twin = np.load(os.path.join(view, prefix + name + ".npy"), mmap_mode="r")
            print(json.dumps({
                "dataset": prefix + name,
                "shape": list(data.shape),
                "dtype": data.dtype.str,
                "dims": list(var.dims),
                "coords": {d: [str(x) for x in ds.indexes[d]] for d in var.dims
                           if d in ds.indexes},
                "sha256": hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest(),
                "npy_equal": bool(twin.shape == data.shape and twin.dtype == data.dtype
                                  and np.array_equal(twin, data,
                                                     equal_nan=data.dtype.kind == "f")),
                "attrs": dict(var.attrs),
            }, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
