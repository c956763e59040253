"""Indexes elsewhere (issue 27 point 3, docs/tools.md): `shardfs-taridx
--out` writes a fold's index into a directory of its own, and `shardfs
--index-dir DIR` reads the index of the fold F in SRC/P from DIR/P/F.taridx,
so a dataset directory its readers cannot write is indexed by them. An
index that does not match its tars is refused, saying why (mtime, size, a
sampled header), rather than serving wrong bytes."""
import os
import subprocess
import tarfile
import time

import pytest

from conftest import TOOLS, mount_stats
import test_tar_writers as tw


def index_into(out, src, fold):
    out.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", "--out", str(out), str(src), fold],
                       capture_output=True)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def dataset(tmp_path):
    """SRC/data/ holds the fold `train` (two shards written by GNU tar and
    bsdtar) and an unindexed tar; its index is written under IDX/data/."""
    root = tmp_path / "trees"
    root.mkdir()
    tw.write_tree(root)
    src, idx = tmp_path / "src", tmp_path / "idx"
    (src / "data").mkdir(parents=True)
    tw.gnu("gnu")(src / "data" / "train_0000.tar", root, ["short", "long"])
    tw.bsd("--format", "pax")(src / "data" / "train_0001.tar", root, ["mid"])
    tw.py(tarfile.PAX_FORMAT)(src / "data" / "other.tar", root, ["mid"])
    index_into(idx / "data", src / "data", "train")
    return src, idx


def expected_fold(d, shards):
    want = {}
    for s in shards:  # a later shard's member wins, as in the view
        want.update(tw.expected(d / s))
    return want


def fails_check(mnt, reason):
    """The fold's view holds only .shardfs/, whose verify says why, and the
    errors log has the line."""
    rep = (mnt / "data" / "train" / ".shardfs" / "verify").read_text()
    assert rep.startswith("status: failed\n") and "--index-dir" in rep and reason in rep, rep
    assert os.listdir(mnt / "data" / "train") == []
    errors = (mnt / ".shardfs" / "errors").read_text()
    assert "data/train.taridx" in errors and reason in errors, errors
    assert mount_stats(mnt)["containers_failed"] >= 1


def test_fold_read_through_an_index_elsewhere(mount, dataset):
    src, idx = dataset
    os.chmod(src / "data", 0o555)  # nobody writes here (root could, the test does not)
    try:
        mnt = mount(src, "--index-dir", str(idx))
        # looked up by path before any listing
        assert (mnt / "data" / "train" / "short" / "a.txt").read_bytes() == b"alpha\n"
        want = expected_fold(src / "data", ["train_0000.tar", "train_0001.tar"])
        got = tw.shown(mnt / "data" / "train")
        assert got == {p: ("file" if k == "big" else k) for p, (k, _) in want.items()}
        for p, (kind, val) in want.items():
            if kind == "file":
                assert (mnt / "data" / "train" / p).read_bytes() == val, p
            elif kind == "link":
                assert os.readlink(mnt / "data" / "train" / p) == val, p
        assert (mnt / "data" / "train" / ".shardfs" / "verify").read_text().startswith("status: ok\n")
        # the shards show only in the fold's view; the tar no fold takes
        # gets its own; nothing of IDX shows in the mount
        assert sorted(os.listdir(mnt / "data")) == ["other", "other.tar", "train", "train_0000.tar",
                                                    "train_0001.tar"]
        assert not (mnt / "data" / "train.taridx").exists()
        assert (mnt / ".shardfs" / "errors").read_text() == ""
    finally:
        os.chmod(src / "data", 0o755)


def test_an_index_beside_its_tars_wins(mount, dataset):
    src, idx = dataset
    # the one in IDX is stale (a shard changed after it), the one beside is not
    time.sleep(0.01)
    os.utime(src / "data" / "train_0001.tar")
    subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src / "data"), "train"], check=True)
    mnt = mount(src, "--index-dir", str(idx))
    assert (mnt / "data" / "train" / ".shardfs" / "verify").read_text().startswith("status: ok\n")
    assert (mnt / "data" / "train" / "short" / "a.txt").read_bytes() == b"alpha\n"


def test_refused_for_a_shard_changed_after_it(mount, dataset):
    src, idx = dataset
    later = (idx / "data" / "train.taridx").stat().st_mtime_ns + 5_000_000_000
    os.utime(src / "data" / "train_0001.tar", ns=(later, later))
    mnt = mount(src, "--index-dir", str(idx))
    fails_check(mnt, "train_0001.tar was modified after the index was written (mtime)")


def older_than_index(idx, path):
    t = (idx / "data" / "train.taridx").stat().st_mtime_ns - 5_000_000_000
    os.utime(path, ns=(t, t))


def test_refused_for_a_shard_of_another_size(mount, dataset):
    """A member appended to a shard (tar -r), its mtime set back: the
    shard holds more than the index says."""
    src, idx = dataset
    extra = src / "extra.txt"
    extra.write_bytes(b"appended\n")
    subprocess.run(["tar", "-rf", str(src / "data" / "train_0001.tar"), "-C", str(src), "extra.txt"],
                   check=True)
    older_than_index(idx, src / "data" / "train_0001.tar")
    mnt = mount(src, "--index-dir", str(idx))
    fails_check(mnt, "train_0001.tar holds more than its rows after offset")
    fails_check(mnt, "(size)")


def test_refused_for_a_shard_rewritten_in_place(mount, dataset):
    """A shard replaced by another tar of the same size and layout whose
    names differ, its mtime set back: a sampled header gives it away."""
    src, idx = dataset
    shard = src / "data" / "train_0000.tar"
    raw = bytearray(shard.read_bytes())
    with tarfile.open(shard) as t:
        first = t.getmembers()[0]
    off = first.offset
    # rename the first member ("short/" -> "shortX", another key) and
    # write its checksum anew
    assert raw[off:off + 7] == b"short/\0"
    raw[off + 5] = ord("X")
    raw[off + 148:off + 156] = b" " * 8
    raw[off + 148:off + 156] = b"%06o\0 " % sum(raw[off:off + 512])
    assert len(raw) == shard.stat().st_size
    shard.write_bytes(bytes(raw))
    older_than_index(idx, shard)
    mnt = mount(src, "--index-dir", str(idx))
    fails_check(mnt, "(a sampled header)")


def test_an_open_fold_stays_when_another_container_goes(mount, dataset):
    """Deleting one container lets go only the view of that file (no-open:
    the inotify event does it): the fold beside it, whose index is not in
    SRC, keeps its view and the kernel its entries, so the path walks
    again without a LOOKUP that would open the fold anew."""
    src, idx = dataset
    mnt = mount(src, "--index-dir", str(idx))
    member = mnt / "data" / "train" / "short" / "a.txt"
    with open(member, "rb") as f:
        assert f.read() == b"alpha\n"
        assert (mnt / "data" / "other" / "mid").is_dir()
        opened = mount_stats(mnt)["containers_opened"]
        os.unlink(src / "data" / "other.tar")
        # the inotify event handled (it dropped the entry): the deleted
        # container's view is gone
        deadline = time.monotonic() + 10
        while (mnt / "data" / "other").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not (mnt / "data" / "other").exists()
        time.sleep(0.5)
        f.seek(0)
        assert f.read() == b"alpha\n"
        assert member.read_bytes() == b"alpha\n"
        assert mount_stats(mnt)["containers_opened"] == opened


def test_an_index_elsewhere_is_not_taken_for_a_gone_container(mount, dataset):
    """--open checks at each view file's last RELEASE whether its container
    is gone: a fold's index in --index-dir is looked for there, not in SRC,
    so its view stays open from one read to the next (it was let go and
    opened anew at every close) and goes once that index is deleted."""
    src, idx = dataset
    mnt = mount(src, "--open", "--index-dir", str(idx))
    member = mnt / "data" / "train" / "short" / "a.txt"
    for _ in range(3):
        assert member.read_bytes() == b"alpha\n"
    stats = mount_stats(mnt)
    assert stats["views_closed"] == 0 and stats["containers_opened"] == 1, stats
    os.unlink(idx / "data" / "train.taridx")
    with open(member, "rb") as f:
        assert f.read() == b"alpha\n"
    # the kernel sends RELEASE after close() returns
    deadline = time.monotonic() + 10
    while mount_stats(mnt)["views_closed"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mount_stats(mnt)["views_closed"] == 1
