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
from relutil import cat, fingerprint, read_fd

SECONDS = 12
VIEW_FILES = (".shardfs/info.json", "docs.jsonl", "features.csv", "regions/forward")


def versions():
    """Two valid tsumugi shards that serve as version A and B of one name."""
    return [FIXTURES / "tsumugi" / "gold_dict.tsumugi", FIXTURES / "tsumugi" / "gold_prod.tsumugi"]


def rendered(src, v):
    """{relative mount path: content} of shard.tsumugi and its view files
    when shard.tsumugi is version v."""
    stage = src.parent / "stage"
    stage.mkdir()
    copy = stage / "shard.tsumugi"
    shutil.copyfile(v, copy)
    out = {"shard.tsumugi": v.read_bytes()}
    for f in VIEW_FILES:
        # named as the mount names it (relative to SRC), for info.json
        b, why = cat(copy, f, cwd=stage)
        assert why is None, why
        out[f"shard/{f}"] = b
    shutil.rmtree(stage)
    return out


def expected(src, vers):
    """{relative mount path: set of acceptable contents} for shard.tsumugi,
    its view files and the added shards (any version)."""
    want = {}
    for v in vers:
        for rel, b in rendered(src, v).items():
            want.setdefault(rel, set()).add(b)
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


def read_until(path, want, within=1.5):
    """Reads `path` until it reads `want` or `within` seconds pass; returns
    the last bytes read and the errnos met on the way."""
    seen, got = [], None
    deadline = time.monotonic() + within
    while got != want and time.monotonic() < deadline:
        try:
            got = path.read_bytes()
        except OSError as e:
            seen.append(e.errno)
        if got != want:
            time.sleep(0.02)
    return got, seen


def test_handle_keeps_the_version_it_opened(tmp_path, mount):
    """Handles opened (not yet read) before their files are replaced by
    rename read the version they opened, SRC files and view parts alike;
    opens made once the change is seen get the new version, and an open
    racing the rename gets one version or the other, never ESTALE."""
    vers = versions()
    src = tmp_path / "src"
    src.mkdir()
    old, new = rendered(src, vers[0]), rendered(src, vers[1])
    # the view files chosen differ between the two versions
    assert all(old[rel] != new[rel] for rel in old)
    (src / "plain").write_bytes(b"A" * 100_000)
    shutil.copyfile(vers[0], src / "shard.tsumugi")
    mnt = mount(src, "--cache-size", "64K")
    rels = sorted(old) + ["plain"]
    # os.open: no isatty() IOCTL, so nothing reaches the daemon after the
    # OPEN before the replacement
    handles = {rel: os.open(mnt / rel, os.O_RDONLY) for rel in rels}
    try:
        (src / ".plain.tmp").write_bytes(b"B" * 50_000)
        os.rename(src / ".plain.tmp", src / "plain")
        shutil.copyfile(vers[1], src / ".shard.tmp")
        os.rename(src / ".shard.tmp", src / "shard.tsumugi")
        old["plain"], new["plain"] = b"A" * 100_000, b"B" * 50_000
        for rel, fd in handles.items():
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            assert read_fd(fd) == old[rel], rel
        # each change is seen within a second (inotify); new opens get it.
        # Until then an open gets the old version, or ENOENT for a view
        # file while its view changes over; never ESTALE
        for rel in rels:
            got, seen = read_until(mnt / rel, new[rel])
            assert got == new[rel], (rel, seen)
            assert set(seen) <= ({errno.ENOENT} if rel.startswith("shard/") else set()), seen
        for rel, fd in handles.items():
            assert read_fd(fd) == old[rel], rel
    finally:
        for fd in handles.values():
            os.close(fd)
    # opens racing a rename: a stat caches the entry, the file is replaced,
    # the open comes at once. It gets a version no older than the last one
    # it got (the entry is dropped once the daemon hears of the change),
    # never ESTALE; the last one shows within a second.
    bodies, seen = [new["plain"]], 0
    for i in range(200):
        os.stat(mnt / "plain")
        bodies.append(bytes([65 + i % 26]) * (1000 + i))
        (src / ".plain.tmp").write_bytes(bodies[-1])
        os.rename(src / ".plain.tmp", src / "plain")
        got = (mnt / "plain").read_bytes()
        assert got in bodies[seen:], (i, len(got))
        seen = bodies.index(got, seen)
    got, seen = read_until(mnt / "plain", bodies[-1])
    assert got == bodies[-1] and not seen, seen
    assert (mnt / ".shardfs" / "errors").read_text() == ""
