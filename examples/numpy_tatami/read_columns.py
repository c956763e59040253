#!/usr/bin/env python3
"""Reads the columns of a .tatami file through a shardfs mount with numpy.

Under `part.tatami`'s view `part/columns/<name>/`:
  valid.bin                   one byte per row, 1 = present
  values.npy                  fixed-width columns, nulls as 0 (memory-mapped here)
  offsets.bin + data.bin      variable-length columns: rows+1 little-endian u64
                              offsets into the bytes (Arrow style)

    python3 read_columns.py MNT/part [COLUMN...]

prints one JSON line per column: name, row count, and the values with None
for nulls (bytes of variable-length columns decoded as UTF-8 where they can
be, else given as a list of byte values).
"""
import json
import os
import sys

import numpy as np


def read_column(view, name):
    """The column's values as a Python list, None for null rows."""
    d = os.path.join(view, "columns", name)
    valid = np.fromfile(os.path.join(d, "valid.bin"), dtype=np.uint8).astype(bool)
    if os.path.exists(os.path.join(d, "values.npy")):
        values = np.load(os.path.join(d, "values.npy"), mmap_mode="r")
        return [v.item() if ok else None for v, ok in zip(values, valid)]
    offsets = np.fromfile(os.path.join(d, "offsets.bin"), dtype="<u8")
    data = np.fromfile(os.path.join(d, "data.bin"), dtype=np.uint8)
    out = []
    for i, ok in enumerate(valid):
        raw = data[offsets[i]:offsets[i + 1]].tobytes()
        if not ok:
            out.append(None)
            continue
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(list(raw))
    return out


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) == 2 else 2
    view = argv[1]
    names = argv[2:] or sorted(os.listdir(os.path.join(view, "columns")))
    for name in names:
        values = read_column(view, name)
        print(json.dumps({"column": name, "rows": len(values), "values": values}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
