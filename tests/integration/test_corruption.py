"""A directory of damaged containers (tests/corrupt/corrupt.py over every
writer's sample) mounted beside intact ones: the daemon stays up, intact
files read exactly as shardfs-cat reads them, damaged parts are refused or
fail with EIO (never another error, never bytes other than the format
module's own), no read hangs, and each problem is logged once."""
import errno
import os
import random
import sys
from pathlib import Path

from conftest import REPO
from relutil import (CAT, TimedReader, cat, copy_samples, errors_lines,
                     fingerprint, read_tree, view_dirs)

sys.path.insert(0, str(REPO / "tests" / "corrupt"))
import corrupt  # noqa: E402


def damaged_corpus(src, samples):
    """Every sample's damaged variants into src/damaged/<fmt>/; returns them."""
    made = []
    for fmt in sorted(os.listdir(samples)):
        d = samples / fmt
        inputs = [d] if fmt == "shardlake" else \
            [f for f in sorted(d.iterdir()) if f.suffix in (".tsumugi", ".tatami", ".tet", ".taridx")]
        made += corrupt.generate(src / "damaged" / fmt, inputs, seed=9, k=14, cat=str(CAT))
    return made


def test_corruption_corpus(tmp_path, tmp_path_factory, mount):
    cache = tmp_path_factory.getbasetemp()
    src = tmp_path / "src"
    samples = copy_samples(src / "intact", cache)
    made = damaged_corpus(src, samples)
    assert len(made) > 100
    before = fingerprint(src)
    mnt = mount(src, "--cache-size", "1M")
    reader = TimedReader(limit=20)

    got = read_tree(mnt, reader)
    # the daemon is still there and answers
    assert (mnt / ".shardfs" / "stats.json").read_bytes()

    # nothing but EIO ever comes back as a failure
    odd = {str(p): e for p, e in got.items() if isinstance(e, int) and e != errno.EIO}
    assert not odd, odd

    # SRC shows through byte for byte, the damaged files too
    for dirpath, _, names in os.walk(src):
        for n in names:
            p = Path(dirpath) / n
            rel = p.relative_to(src)
            assert got[mnt / rel] == p.read_bytes(), rel

    # intact containers: every view file as shardfs-cat reads it, no EIO
    views = view_dirs(src, mnt)
    intact = {v: c for v, c in views.items() if "damaged" not in v.relative_to(mnt).parts}
    assert {c.suffix for c in intact.values()} >= {".tsumugi", ".tet", ".sidx"}
    owner = {}
    for p in got:
        v = next((q for q in p.parents if q in views), None)
        if v is not None:
            owner[p] = v
    for p, v in owner.items():
        if v in intact:
            want, why = cat(intact[v], str(p.relative_to(v)), cwd=src)
            assert why is None and got[p] == want, (p, why)

    # damaged containers: whatever the mount serves is what the format module
    # says (bytes or failure), checked on a sample of view files
    damaged = {v: c for v, c in views.items() if v not in intact}
    assert damaged
    rnd = random.Random(5)
    pairs = sorted(p for p, v in owner.items() if v in damaged)
    # every view's own info.txt, and a sample of the rest
    infos = [p for p in pairs if p.name == "info.txt" and p.parent == owner[p] / ".shardfs"]
    for p in infos + rnd.sample(pairs, min(100, len(pairs))):
        v = owner[p]
        want, why = cat(damaged[v], str(p.relative_to(v)), cwd=src)
        if want is None and p.parent == v / ".shardfs" and got[p] != errno.EIO:
            # a container that passes the listing's check but fails its
            # open is a view of .shardfs/ alone, which says why; the tool
            # cannot open it at all, and says the same why
            reason = why.strip().rsplit(": ", 1)[-1]
            assert b"not opened: " in got[p] and reason.encode() in got[p], (p, why, got[p])
        elif want is None:
            assert got[p] == errno.EIO, (p, why)
        else:
            assert got[p] == want, p

    # each failure is in the error log, once; reading again adds nothing
    log = errors_lines(mnt)
    keys = [line.split(" ", 1)[1] for line in log]
    assert len(keys) == len(set(keys)), "a problem was logged twice"
    logged_paths = {k.rsplit(": ", 1)[0].split(": ")[0] for k in keys}
    for p, e in got.items():
        if e == errno.EIO:
            rel = str(p.relative_to(mnt))
            assert any(line.split(" ", 1)[1].startswith(rel + ": ") for line in log), rel
    # a damaged container that got no view was refused, and says so (for the
    # formats built into this daemon: their intact samples have views)
    shown = set(views.values())
    built = {c.suffix for c in intact.values()}
    for dirpath, _, names in os.walk(src / "damaged"):
        for n in names:
            c = Path(dirpath) / n
            if c.suffix in built and c not in shown:
                rel = str(c.relative_to(src))
                assert any(k.startswith(rel + ": ") for k in keys), rel
    assert logged_paths
    read_tree(mnt, reader)
    assert errors_lines(mnt) == log

    assert fingerprint(src) == before
