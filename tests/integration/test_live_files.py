"""The root's live files, .shardfs/stats.json and .shardfs/errors (fs/meta.h):
every open reads one snapshot, whose size stat and fstat show, while other
readers stat and read them and new problems are logged."""
import json
import os
import re
import threading
import time

import pytest


def read_all(fd):
    parts = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(parts)
        parts.append(b)


def check_loop(path, rounds, bad, is_json):
    """stat, open, fstat, read to the end: sizes and bytes agree."""
    for _ in range(rounds):
        before = os.stat(path).st_size
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            data = read_all(fd)
            again = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if not (before == size == again == len(data)):
            bad.append((path.name, before, size, again, len(data)))
        elif is_json:
            try:
                json.loads(data)
            except ValueError as e:
                bad.append((path.name, "torn", str(e)))
        elif data and not data.endswith(b"\n"):
            bad.append((path.name, "torn line", data[-80:]))


# An empty snapshot is read with no READ: its stat and the open after it
# must still agree when the first problem is logged between them (by
# default this failed in most of these mounts when an empty snapshot was
# never handed out twice).
@pytest.mark.parametrize("opens", [(), ("--open",)], ids=["default", "open"])
def test_snapshot_when_the_log_starts_empty(tmp_path, mount, opens):
    bad = []
    for i in range(8):
        src = tmp_path / f"src{i}"
        src.mkdir()
        mnt = mount(src, *opens)
        errors = mnt / ".shardfs" / "errors"
        assert errors.read_text() == ""
        readers = [threading.Thread(target=check_loop, args=(errors, 200, bad, False))
                   for _ in range(3)]
        for t in readers:
            t.start()
        time.sleep(0.002 * i)
        (src / "bad.tatami").write_bytes(b"not a tatami file\n" * 20)
        assert not os.path.exists(mnt / "bad")
        for t in readers:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in readers)
        # the thread that read it empty sees the problem at its next open
        assert "bad.tatami" in errors.read_text()
        assert mount.last.stop() == 0
    assert bad[:5] == []


# by default a node per snapshot (no OPEN comes); --open: one per handle
@pytest.mark.parametrize("opens", [(), ("--open",)], ids=["default", "open"])
def test_snapshot_per_open(tmp_path, mount, opens):
    src = tmp_path / "src"
    src.mkdir()
    (src / "plain.txt").write_bytes(b"x" * 100)
    mnt = mount(src, *opens)
    meta = mnt / ".shardfs"
    stop = threading.Event()
    logged = []

    def writer():
        # each damaged container looked up logs one more line in errors
        i = 0
        while not stop.is_set():
            (src / f"bad{i}.tatami").write_bytes(b"not a tatami file %d\n" % i * 50)
            os.path.exists(mnt / f"bad{i}")
            logged.append(i)
            i += 1

    bad = []
    readers = [threading.Thread(target=check_loop, args=(meta / name, 150, bad, json_))
               for name, json_ in (("stats.json", True), ("errors", False)) * 3]
    w = threading.Thread(target=writer)
    w.start()
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=300)
    stop.set()
    w.join(timeout=60)
    assert not any(t.is_alive() for t in readers)
    assert bad[:5] == []
    # the writer's problems reached the log while it was read
    assert len(logged) > 10
    text = (meta / "errors").read_text()
    # each file logged at least one line, kept or counted as dropped (the
    # log keeps its latest 1000 lines)
    dropped = re.match(r"(\d+) earlier problems are not kept", text)
    kept = set(re.findall(r"bad(\d+)\.tatami", text))
    assert len(kept) + (int(dropped.group(1)) if dropped else 0) >= len(logged) - 1
    # a handle keeps reading its snapshot while the content changes
    with open(meta / "errors", "rb", buffering=0) as f:
        first = f.read(10)
        (src / "late.tatami").write_bytes(b"late damage\n" * 40)
        os.path.exists(mnt / "late")
        rest = read_all(f.fileno())
        assert os.fstat(f.fileno()).st_size == len(first) + len(rest)
    # by the file's name: once the log drops lines, its first line says
    # it "keeps the latest" ones
    assert b"late.tatami" not in first + rest
    assert "late.tatami" in (meta / "errors").read_text()
