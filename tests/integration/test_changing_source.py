"""A source that changes under running readers: shards are added (temp +
rename), replaced by another version and deleted while 8 readers read them
and their views. Every read sees exactly one version (old or new) of a file,
never a mix; the only failure is ENOENT for a file that is gone (no EIO at
all); nothing is logged as an error, and afterwards the mount shows SRC as
the writer left it."""
import errno
import os
import random
import shutil
import threading
import time
from pathlib import Path

from conftest import FIXTURES
from relutil import cat, fingerprint

SECONDS = 12
VIEW_FILES = (".shardfs/info.json", "docs.jsonl", "features.csv", "regions/forward")


def versions():
    """Two valid tsumugi shards that serve as version A and B of one name."""
    return [FIXTURES / "tsumugi" / "gold_dict.tsumugi", FIXTURES / "tsumugi" / "gold_prod.tsumugi"]


def expected(src, vers):
    """{relative mount path: set of acceptable contents} for shard.tsumugi,
    its view files and the added shards (any version)."""
    stage = src.parent / "stage"
    stage.mkdir()
    want = {}
    for v in vers:
        copy = stage / "shard.tsumugi"
        shutil.copyfile(v, copy)
        want.setdefault("shard.tsumugi", set()).add(v.read_bytes())
        for f in VIEW_FILES:
            # named as the mount names it (relative to SRC), for info.json
            b, why = cat(copy, f, cwd=stage)
            assert why is None, why
            want.setdefault(f"shard/{f}", set()).add(b)
    shutil.rmtree(stage)
    return want


def test_changing_source(tmp_path, mount):
    vers = versions()
    src = tmp_path / "src"
    src.mkdir()
    want = expected(src, vers)
    shutil.copyfile(vers[0], src / "shard.tsumugi")
    mnt = mount(src, "--cache-size", "64K")
    stop = threading.Event()
    problems, counts = [], {"reads": 0, "enoent": 0}
    alive = {}  # added shard name -> version bytes, while it exists
    lock = threading.Lock()

    def writer():
        rnd = random.Random(1)
        n = 0
        while not stop.is_set():
            act = rnd.choice(["replace", "add", "delete"])
            if act == "replace":
                tmp = src / ".shard.tmp"
                shutil.copyfile(rnd.choice(vers), tmp)
                os.rename(tmp, src / "shard.tsumugi")
            elif act == "add":
                v = rnd.choice(vers)
                tmp = src / f".new-{n}.tmp"
                shutil.copyfile(v, tmp)
                with lock:
                    alive[f"new-{n}.tsumugi"] = v.read_bytes()
                os.rename(tmp, src / f"new-{n}.tsumugi")
                n += 1
            elif alive:
                with lock:
                    name = rnd.choice(sorted(alive))
                os.unlink(src / name)
                with lock:
                    del alive[name]
            time.sleep(0.05)

    def reader(seed):
        rnd = random.Random(seed)
        while not stop.is_set():
            with lock:
                added = sorted(alive)
            rel = rnd.choice(sorted(want) + added[-3:])
            try:
                with open(mnt / rel, "rb") as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    got = f.read()
            except OSError as e:
                if e.errno == errno.ENOENT and (rel.startswith("new-") or rel.startswith("shard/")):
                    counts["enoent"] += 1  # deleted, or the view between versions
                else:
                    problems.append(f"{rel}: {e}")
                continue
            counts["reads"] += 1
            ok = got in want[rel] if rel in want else got in {v.read_bytes() for v in vers}
            if not ok:
                problems.append(f"{rel}: {len(got)} bytes match no version")

    threads = [threading.Thread(target=writer)] + \
        [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a thread hung"
    assert not problems, problems[:20]
    assert counts["reads"] > 100, counts
    # after the dust settles the mount shows SRC as it now is
    time.sleep(1.5)
    now = os.listdir(src)
    assert sorted(os.listdir(mnt)) == sorted(now + [n[:-len(".tsumugi")] for n in now])
    for name in os.listdir(src):
        assert (mnt / name).read_bytes() == (src / name).read_bytes()
    after = fingerprint(src)
    assert (mnt / ".shardfs" / "errors").read_text() == ""
    assert fingerprint(src) == after
