"""Sparse tar members as GNU tar writes them in its pax 1.0 format
(docs/formats/taridx.md), each piece one data byte and a hole: a member
costs the view two extents a piece (the budget's tests, mounted and
through the module)."""
import io
import tarfile

PIECES = 65536  # TX_SPARSE_MAX: the most pieces a member may have


def add_sparse(t, name, seed, pieces=PIECES):
    """Adds to tar `t` a GNU 1.0 (pax) sparse member, written as GNU tar
    writes that format (docs/formats/taridx.md): `pieces` data bytes, each
    followed by a three-byte hole, so each costs the view a mapped and a
    zero extent (more than 128 KiB in all: not a file pushed at open).
    Returns the member's bytes."""
    text = b"%d\n" % pieces + b"".join(b"%d\n1\n" % (4 * k) for k in range(pieces))
    text += bytes(-len(text) % 512)
    data = bytes((seed + k) % 251 + 1 for k in range(pieces))
    ti = tarfile.TarInfo(f"GNUSparseFile.0/{name}")
    ti.size = len(text) + len(data)
    ti.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                      "GNU.sparse.name": name, "GNU.sparse.realsize": str(4 * pieces)}
    t.addfile(ti, io.BytesIO(text + data))
    out = bytearray(4 * pieces)
    out[0::4] = data
    return bytes(out)
