"""A SRC written by someone hostile (docs/security.md, issue 15): nothing
outside SRC is ever read, whether a side file is a symlink leading out (or
in: symlinks in SRC are never followed by the daemon) or a directory is
swapped for a symlink under a reader; and a FIFO, socket or device wherever
it stands (fold shard, Shardlake manifest, container name, plain entry)
never blocks the daemon. Each refusal is reported in .shardfs/errors. Every
command through the mount runs in a subprocess with a timeout, so a hang
fails the test instead of stalling it."""
import errno
import os
import shutil
import socket
import stat
import sys
import time

import pytest

from conftest import FIXTURES, WRITERS, read_through
from relutil import cat, run

sys.path.insert(0, str(WRITERS))
import taridx_writer as tw  # noqa: E402

SECRET = b"TOPSECRET-not-in-src\n"


def secret_fold(where, fold, data=SECRET):
    """A one-member fold whose only member holds `data`; returns its rows."""
    return tw.write_fold(where, fold, [("secret", {"txt": data})])


def assert_no_secret(mnt):
    """No file of the mount, views included, reads SECRET."""
    for dirpath, dirnames, filenames in os.walk(mnt):
        for n in filenames:
            p = os.path.join(dirpath, n)
            if os.path.islink(p) or n == "errors":
                continue
            try:
                data = read_through(p)
            except OSError as e:
                assert e.errno == errno.EIO, (p, e)
                continue
            assert SECRET not in data, p


def test_fold_shard_symlinked_outside_is_refused(tmp_path, mount):
    """The reproducer: x_0000.tar a symlink to a tar outside SRC, with a
    one-row x.taridx; and y_0000.tar a symlink to a tar inside SRC, refused
    as well (the daemon follows no symlink in SRC)."""
    outside, src = tmp_path / "outside", tmp_path / "src"
    rows = secret_fold(outside, "x")
    src.mkdir()
    shutil.move(outside / "x.taridx", src / "x.taridx")
    os.symlink(outside / "x_0000.tar", src / "x_0000.tar")
    inner = secret_fold(src / "store", "y", b"inside SRC, but behind a symlink\n")
    shutil.move(src / "store" / "y.taridx", src / "y.taridx")
    os.symlink("store/y_0000.tar", src / "y_0000.tar")
    mnt = mount(src)
    for fold, r in (("x", rows), ("y", inner)):
        assert (mnt / fold).is_dir()
        # the row is listed with its size, but reads nothing
        row = mnt / fold / ".shardfs" / "rows" / "0"
        assert row.stat().st_size == r[0]["size"]
        with pytest.raises(OSError) as ei:
            read_through(row)
        assert ei.value.errno == errno.EIO
        assert not (mnt / fold / "secret.txt").exists()
    # the symlinks themselves show as symlinks (the reader's kernel follows them)
    assert os.readlink(mnt / "x_0000.tar") == str(outside / "x_0000.tar")
    # the tar inside SRC still reads as itself
    assert (mnt / "store" / "y_0000.tar").read_bytes() == (src / "store" / "y_0000.tar").read_bytes()
    errors = (mnt / ".shardfs" / "errors").read_text()
    for shard in ("x_0000.tar", "y_0000.tar"):
        assert any(shard in line and "symlink" in line for line in errors.splitlines()), errors
    verify = (mnt / "x" / ".shardfs" / "verify").read_text()
    assert "symlink" in verify and SECRET.decode() not in verify
    assert_no_secret(mnt)
    # the tools open side files by the same rules
    for fold in ("x", "y"):
        got, why = cat(src / f"{fold}.taridx", ".shardfs/rows/0")
        assert got is None and "symlink" in why, (got, why)


def test_shardlake_side_files_symlinked_outside_are_refused(tmp_path, mount):
    """manifest.json and pq_codebook.bin symlinked to a file outside SRC:
    neither info.txt, info.json nor verify shows a byte of it."""
    src = tmp_path / "src"
    idx = FIXTURES / "shardlake" / "main" / "indexes"
    pq = next(d for d in sorted(idx.iterdir()) if (d / "pq_codebook.bin").exists())
    shutil.copytree(pq, src / "idx")
    secret = tmp_path / "secret.json"
    secret.write_bytes(SECRET)
    for side in ("manifest.json", "pq_codebook.bin"):
        (src / "idx" / side).unlink()
        os.symlink(secret, src / "idx" / side)
    mnt = mount(src)
    shards = mnt / "idx" / "shards"
    views = [shards / n[:-5] for n in sorted(os.listdir(shards)) if n.endswith(".sidx")]
    assert views
    for v in views:
        for meta in ("info.txt", "info.json", "verify"):
            text = (v / ".shardfs" / meta).read_bytes()
            assert b"TOPSECRET" not in text, (v, meta)
        verify = (v / ".shardfs" / "verify").read_text()
        assert "manifest.json" in verify and "symlink" in verify, verify
        # the shard's own arrays still read
        assert (v / "ids.npy").stat().st_size > 0
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "TOPSECRET" not in errors
    assert_no_secret(mnt)


def test_directory_swapped_for_symlink_under_a_reader(tmp_path, mount):
    """A reader holds directory d open; d is then replaced by a symlink to a
    directory outside SRC holding a plain file and a fold. Names looked up
    through the old d find nothing outside: the daemon resolves d's path
    beneath SRC with no symlink followed."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    (src / "d").mkdir(parents=True)
    (src / "d" / "inside.txt").write_bytes(b"inside\n")
    outside.mkdir()
    (outside / "plain.txt").write_bytes(SECRET)
    secret_fold(outside, "f")
    mnt = mount(src)
    fd = os.open(mnt / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert os.stat("inside.txt", dir_fd=fd).st_size == 7
        os.rename(src / "d", src / "old-d")
        os.symlink(outside, src / "d")
        for name in ("plain.txt", "f", "inside.txt"):
            try:
                f = os.open(name, os.O_RDONLY, dir_fd=fd)
            except OSError as err:
                assert err.errno in (errno.ELOOP, errno.ENOENT, errno.ESTALE), (name, err)
                continue
            try:
                data = os.read(f, 4096)
            finally:
                os.close(f)
            # only the name looked up before the swap may still be the
            # kernel's entry (its one-second timeout, when the inotify drop
            # comes late on a busy machine): the file inside SRC it was
            assert name == "inside.txt" and data == b"inside\n", (name, data)
        # a listing of it, opened anew, lists nothing of outside either
        with pytest.raises(OSError) as ei:
            os.listdir(f"/proc/self/fd/{fd}")
        assert ei.value.errno == errno.ELOOP
    finally:
        os.close(fd)
    # through the mount, d is now the symlink it is in SRC: at once when the
    # inotify drop of the old entry has reached the kernel, else once the
    # entry's one-second timeout has passed (a busy machine delays the first)
    deadline = time.monotonic() + 5
    while True:
        try:
            target = os.readlink(mnt / "d")
            break
        except OSError as e:
            if e.errno != errno.EINVAL or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert target == str(outside)
    assert (mnt / "old-d" / "inside.txt").read_bytes() == b"inside\n"
    errors = (mnt / ".shardfs" / "errors").read_text().splitlines()
    # the lookups and the listing refused, each said why
    for path in ("d/plain.txt", "d"):
        assert any(line.split(" ", 1)[1].startswith(path + ": ") and "symlink" in line
                   for line in errors), errors


def special(path, kind):
    """Makes a FIFO, a bound socket or a character device (null's) at path."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        # bound by a relative name: a socket path is limited to 107 bytes
        here = os.getcwd()
        os.chdir(path.parent)
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(path.name)
        finally:
            os.chdir(here)
    else:
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))


KINDS = {"fifo": "a FIFO", "socket": "a socket", "device": "a character device"}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_special_files_never_block(tmp_path, mount, kind):
    """The reproducer (`mkfifo demo_0000.tar` beside demo.taridx made `ls
    MNT` hang), and the same kind of file as a Shardlake manifest, as a
    file named like a container and as a plain entry."""
    src = tmp_path / "src"
    rows = tw.write_fold(src, "demo", tw.sample_samples(8), shard_maxfiles=4)
    (src / "demo_0000.tar").unlink()
    special(src / "demo_0000.tar", kind)
    idx = FIXTURES / "shardlake" / "main" / "indexes"
    shutil.copytree(next(iter(sorted(idx.iterdir()))), src / "idx")
    (src / "idx" / "manifest.json").unlink()
    special(src / "idx" / "manifest.json", kind)
    special(src / "named.tet", kind)
    special(src / "plain", kind)
    mnt = mount(src)
    r = run("ls", "-la", mnt)
    assert r.returncode == 0, r
    listed = set(os.listdir(mnt))
    assert {"demo", "demo.taridx", "demo_0000.tar", "named.tet", "plain", "idx"} <= listed
    assert "named" not in listed
    # the members in the readable shard read; those of the refused one fail
    for row in rows:
        p = mnt / "demo" / row["name"].decode()
        if row["tar"] == "demo_0001.tar":
            assert read_through(p) == row["data"]
        else:
            assert not p.exists()
    r = run("cat", mnt / "demo" / ".shardfs" / "rows" / "0")
    assert r.returncode != 0 and b"Input/output error" in r.stderr, r
    shards = mnt / "idx" / "shards"
    sidx = sorted(n for n in os.listdir(shards) if n.endswith(".sidx"))[0]
    r = run("cat", shards / sidx[:-5] / ".shardfs" / "verify")
    assert r.returncode == 0 and KINDS[kind].encode() in r.stdout, r
    # the special file itself shows with its type, as in SRC
    assert stat.S_IFMT(os.lstat(mnt / "plain").st_mode) == stat.S_IFMT(os.lstat(src / "plain").st_mode)
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert any("demo_0000.tar" in line and KINDS[kind] in line for line in errors.splitlines()), errors
