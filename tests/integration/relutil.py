"""Helpers shared by the reliability tests: sample data from every writer,
SRC fingerprints, timed reads through a mount, commands through a mount
with a deadline, and shardfs-cat."""
import hashlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import TOOLS, WRITERS

CAT = TOOLS / "shardfs-cat"
FORMATS = ("tsumugi", "tatami", "taridx", "shardlake", "tet")
CONTAINER_SUFFIXES = (".tsumugi", ".tatami", ".tet", ".sidx", ".taridx")
_samples = {}


def writer_sample(fmt, cache_dir):
    """The writer's --sample output for fmt (written once per session)."""
    if fmt not in _samples:
        out = Path(cache_dir) / f"sample-{fmt}"
        if out.exists():
            shutil.rmtree(out)
        subprocess.run(["/usr/bin/python3", str(WRITERS / f"{fmt}_writer.py"),
                        "--sample", str(out)], check=True, capture_output=True, timeout=300)
        _samples[fmt] = out
    return _samples[fmt]


def copy_samples(dst, cache_dir):
    """Every format's sample in dst/<fmt>/ (samples share names)."""
    dst = Path(dst)
    for fmt in FORMATS:
        s = writer_sample(fmt, cache_dir)
        shutil.copytree(s, dst / fmt, ignore=shutil.ignore_patterns("*.expect.json"))
    return dst


def fingerprint(root):
    """Every path under root with its type, mode, size and content hash."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = os.lstat(p)
            if os.path.islink(p):
                v = ("l", os.readlink(p))
            elif p.is_dir():
                v = ("d", st.st_mode)
            else:
                v = ("f", st.st_mode, st.st_size, st.st_mtime_ns,
                     hashlib.sha256(p.read_bytes()).hexdigest())
            out[str(p.relative_to(root))] = v
    return out


def cat(container, path, cwd=None):
    """(bytes, None) from shardfs-cat, or (None, stderr) when it fails; with
    cwd, the container is named relative to it (info views name the file as
    the mount does, relative to SRC)."""
    name = os.path.relpath(container, cwd) if cwd else str(container)
    r = subprocess.run([str(CAT), name, path], capture_output=True, timeout=120, cwd=cwd)
    return (r.stdout, None) if r.returncode == 0 else (None, r.stderr.decode(errors="replace"))


def view_dirs(src, mnt):
    """{view dir in the mount: its container in SRC} for every view shown."""
    views = {}
    for dirpath, _, filenames in os.walk(src):
        for n in filenames:
            c = Path(dirpath) / n
            if c.suffix not in CONTAINER_SUFFIXES:
                continue
            rel = c.parent.relative_to(src)
            for name in (c.stem, c.name + ".d"):
                if (c.parent / name).exists():
                    continue
                v = mnt / rel / name
                if v.is_dir() and (v / ".shardfs").is_dir():
                    views[v] = c
                    break
    return views



def within(limit, what, fn):
    """fn() run in a worker thread: its value, or the errno of the OSError it
    raised. A call that does not return within `limit` seconds is a hang and
    fails the caller instead of blocking it."""
    box = {}

    def work():
        try:
            box["v"] = fn()
        except OSError as e:
            box["v"] = e.errno

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(limit)
    assert not t.is_alive(), f"{what} hung for {limit} s"
    return box["v"]


class TimedReader:
    """Reads files in a worker thread; a read that does not complete within
    `limit` seconds is a hang and fails the caller instead of blocking it."""

    def __init__(self, limit=20, cap=64 << 20):
        self.limit, self.cap = limit, cap

    def read(self, path):
        """bytes, or the errno of the failure."""

        def work():
            with open(path, "rb") as f:
                # in pieces, and at most `cap` bytes: a damaged length may
                # claim a petabyte
                parts, n = [], 0
                while n < self.cap and (b := f.read(1 << 20)):
                    parts.append(b)
                    n += len(b)
                return b"".join(parts)

        return within(self.limit, f"read of {path}", work)


def read_tree(mnt, reader, include_meta=True):
    """{path: bytes or errno} for every file under mnt, view .shardfs/ included."""
    out = {}
    stack = [Path(mnt)]
    while stack:
        d = stack.pop()
        try:
            names = os.listdir(d)
        except OSError as e:
            out[d] = e.errno
            continue
        if include_meta and (d / ".shardfs").is_dir() and d != Path(mnt):
            names.append(".shardfs")
        for n in names:
            p = d / n
            if p.is_symlink():
                continue
            if p.is_dir():
                stack.append(p)
            else:
                out[p] = reader.read(p)
    return out


def read_fd(fd, off=0, length=None):
    """`length` bytes (all, when None) of an open descriptor from `off`,
    with pread: no buffering, no isatty()."""
    parts, n = [], 0
    while length is None or n < length:
        b = os.pread(fd, 1 << 20 if length is None else min(1 << 20, length - n), off + n)
        if not b:
            break
        parts.append(b)
        n += len(b)
    return b"".join(parts)


def errors_lines(mnt):
    return (Path(mnt) / ".shardfs" / "errors").read_text(errors="replace").splitlines()



def run(*cmd, timeout=20):
    """A command through the mount; a hang fails the test. A process stuck
    in the kernel cannot be reaped: it is left to die with the daemon,
    which the mount fixture's teardown stops."""
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"{cmd} hung for {timeout} s")
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)
