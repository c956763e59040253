"""Mounted tests of the taridx fold tree with tars the real writers make at
test time (GNU tar, bsdtar, Python's tarfile): member names that collide
with .shardfs, '.', '..', each other or a directory; files stored twice
(self hard links) and links to a path overwritten later; WebDataset shard
names and pax records; misses answered without listing the fold; a path of
32,700 levels. Expected bytes come from tarfile (extractfile resolves a
hard link to the member stored before it), never from the view."""
import errno
import io
import os
import shutil
import subprocess
import tarfile
import time

import pytest

from conftest import TOOLS, mount_stats, read_through, shown_path

WRITERS = ["gnu", "bsdtar", "tarfile"]


def index(src, fold):
    p = subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src), fold],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()


def write_tree(root, files):
    """files: {relative path: bytes}, written in order (parents made)."""
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def tar_with(writer, tar, cwd, names, append=False):
    """Archives `names` (relative to cwd, in this order) with a real writer."""
    tar = str(tar)
    if writer == "gnu":
        cmd = ["tar", "-rf" if append else "-cf", tar, "--", *names]
    elif writer == "bsdtar":
        cmd = ["bsdtar", "-rf" if append else "-cf", tar, "--", *names]
    else:
        with tarfile.open(tar, "a" if append else "w") as t:
            for n in names:
                t.add(os.path.join(cwd, n), arcname=n, recursive=False)
        return
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, timeout=60)


def expected(tars):
    """{shown path: bytes or ('symlink', target)} as tarfile reads the tars
    in fid order; the later of two equal paths wins."""
    out = {}
    for tar in tars:
        with tarfile.open(tar, encoding="utf-8", errors="surrogateescape") as t:
            for m in t.getmembers():
                if m.isreg() or m.islnk():
                    out[shown_path(m.name)] = t.extractfile(m).read()
                elif m.issym():
                    out[shown_path(m.name)] = ("symlink", m.linkname)
    return out


def seen(view):
    """{path: bytes or ('symlink', target)} of everything under the view."""
    out = {}
    for root, dirs, files in os.walk(view):
        for n in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, view)
            out[rel] = ("symlink", os.readlink(p)) if os.path.islink(p) else read_through(p)
    return out


def listed(mnt):
    return mount_stats(mnt)["view_dirs_listed"]


# ---- names that collide with the view's own -------------------------------

@pytest.mark.parametrize("writer", WRITERS)
def test_member_under_shardfs(mount, tmp_path, writer):
    """A member at .shardfs/... used to kill the daemon (null lazy table in
    the view's own .shardfs/): it now shows under .shardfs#1/."""
    work, src = tmp_path / "work", tmp_path / "src"
    src.mkdir()
    files = {".shardfs/info.txt": b"member info\n", ".shardfs/rows/0": b"row zero",
             "x.jpg": b"jpeg bytes"}
    write_tree(work, files)
    tar_with(writer, src / "f_0.tar", work, list(files))
    index(src, "f")
    mnt = mount(src)
    view = mnt / "f"
    # a lookup first (the crash came from a lookup too), then the listing
    assert read_through(view / ".shardfs#1" / "info.txt") == b"member info\n"
    assert sorted(os.listdir(view)) == [".shardfs#1", "x.jpg"]
    assert seen(view) == {".shardfs#1/info.txt": b"member info\n",
                          ".shardfs#1/rows/0": b"row zero", "x.jpg": b"jpeg bytes"}
    # the view's own files are untouched
    assert read_through(view / ".shardfs" / "info.txt").startswith(b"iTar fold f")
    samples = read_through(view / ".shardfs" / "samples.jsonl").decode()
    assert '".shardfs#1/info.txt"' in samples and '".shardfs#1/rows/0"' in samples


def test_shardfs_file_and_dir_and_dots(mount, tmp_path):
    """A root file .shardfs, a directory .shardfs, '.' and '..' components,
    '..' inside a path: each gets its escape, none is lost, nothing leaves
    the view."""
    src = tmp_path / "src"
    src.mkdir()
    members = [(".shardfs", b"F"), (".shardfs/verify", b"V"), ("..", b"up"),
               ("../esc.txt", b"E"), ("a/../b.txt", b"B"), ("./c.txt", b"C")]
    with tarfile.open(src / "f_0.tar", "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    index(src, "f")
    mnt = mount(src)
    view = mnt / "f"
    assert seen(view) == {".shardfs#1": b"F", ".shardfs#2/verify": b"V", "..#1": b"up",
                          "..#2/esc.txt": b"E", "a/..#1/b.txt": b"B", "c.txt": b"C"}
    assert not (mnt / "esc.txt").exists()


# ---- names that collide with each other ------------------------------------

@pytest.mark.parametrize("lookups_first", [False, True])
def test_file_and_directory_of_one_name(mount, tmp_path, lookups_first):
    """A file `a` and members under `a/`: the directory becomes `a#1`, and a
    real directory `a#1` is never merged into it (it becomes `a#1#1`). A
    directory record and a file of one name show the file."""
    src = tmp_path / "src"
    src.mkdir()
    members = [("a", b"A"), ("a/b", b"B"), ("a#1/c", b"C"), ("d/e", b"E"), ("d", b"D"),
               ("k/", None), ("k", b"K"), ("x.jpg", b"X"), ("x.jpg/y.jpg", b"Y")]
    with tarfile.open(src / "f_0.tar", "w", format=tarfile.GNU_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            if data is None:
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    index(src, "f")
    mnt = mount(src)
    view = mnt / "f"
    if lookups_first:
        # the flat names resolve through the index before any listing
        assert read_through(view / "x.jpg") == b"X"
        assert read_through(view / "a") == b"A"
    want = {"a": b"A", "a#1/b": b"B", "a#1#1/c": b"C", "d/e": b"E", "d#1": b"D", "k": b"K",
            "x.jpg": b"X", "x.jpg#1/y.jpg": b"Y"}
    assert seen(view) == want


# ---- files stored twice, links to overwritten paths -------------------------

@pytest.mark.parametrize("writer", WRITERS)
def test_self_hard_links(mount, tmp_path, writer):
    """`tar cf x.tar dir dir/f` and `find . | tar -cf x.tar -T -` store the
    second copy as a hard link to itself: it reads the first copy's bytes."""
    work, src = tmp_path / "work", tmp_path / "src"
    src.mkdir()
    write_tree(work, {"dir/f.txt": b"first file\n" * 100, "dir/g.bin": bytes(range(256)) * 9})
    tar_with(writer, src / "f_0.tar", work, ["dir", "dir/f.txt"])
    # what `find . | tar -cf x.tar -T -` writes: every path once more
    names = [os.path.relpath(os.path.join(r, n), work)
             for r, ds, fs in os.walk(work) for n in sorted(ds) + sorted(fs)]
    tar_with(writer, src / "f_1.tar", work, ["."] + names)
    if writer == "gnu":
        # GNU tar stores the second copies as hard links to themselves
        for tar in ("f_0.tar", "f_1.tar"):
            with tarfile.open(src / tar) as t:
                assert any(m.islnk() and shown_path(m.name) == shown_path(m.linkname)
                           == "dir/f.txt" for m in t.getmembers())
    index(src, "f")
    mnt = mount(src)
    view = mnt / "f"
    want = expected([src / "f_0.tar", src / "f_1.tar"])
    assert want["dir/f.txt"] == b"first file\n" * 100
    assert seen(view) == want
    # no row is a member the view could not read
    assert b"status: ok" in read_through(view / ".shardfs" / "verify")


@pytest.mark.parametrize("writer", WRITERS)
def test_link_to_path_overwritten_later(mount, tmp_path, writer):
    """A hard link stored before its target's path is written again shows
    the older bytes, as tar extracts them; a link stored after shows the
    newer."""
    work, src = tmp_path / "work", tmp_path / "src"
    src.mkdir()
    write_tree(work, {"a.bin": b"old" * 1000})
    os.link(work / "a.bin", work / "b.bin")
    tar_with(writer, src / "f_0.tar", work, ["a.bin", "b.bin"])
    (work / "b.bin").unlink()
    (work / "a.bin").unlink()
    write_tree(work, {"a.bin": b"new!" * 777})
    os.link(work / "a.bin", work / "c.bin")
    tar_with(writer, src / "f_0.tar", work, ["a.bin", "c.bin"], append=True)
    index(src, "f")
    with tarfile.open(src / "f_0.tar") as t:
        kinds = [(m.name, m.type) for m in t.getmembers()]
    assert ("b.bin", tarfile.LNKTYPE) in kinds, kinds
    mnt = mount(src)
    view = mnt / "f"
    want = expected([src / "f_0.tar"])
    assert want == {"a.bin": b"new!" * 777, "b.bin": b"old" * 1000, "c.bin": b"new!" * 777}
    assert seen(view) == want


# ---- WebDataset: shard names and pax records ---------------------------------

def webdataset_shard(path, first, count):
    """A shard as WebDataset's writer makes it: tarfile, a pax record with a
    float mtime before every member, samples key.cls + key.jpg."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        for i in range(first, first + count):
            for ext, data in (("cls", b"%d" % (i % 7)), ("jpg", os.urandom(100 + i))):
                ti = tarfile.TarInfo(f"sample{i:06d}.{ext}")
                ti.size = len(data)
                ti.mtime = 1700000000.25 + i
                t.addfile(ti, io.BytesIO(data))


def test_webdataset_names_and_pax_records(mount, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    webdataset_shard(src / "img-train-000000.tar", 0, 40)
    webdataset_shard(src / "img-train-000001.tar", 40, 35)
    # another fold "img" ("img-train-..." has a '-' in its suffix: not img's)
    webdataset_shard(src / "img-000000.tar", 500, 3)
    with tarfile.open(src / "img-train-000000.tar") as t:
        assert t.getmembers()[0].pax_headers.get("mtime") == "1700000000.25"
    index(src, "img-train")
    index(src, "img")
    mnt = mount(src)
    view = mnt / "img-train"
    before = listed(mnt)
    # members resolve and names that are not members answer ENOENT, all
    # without listing the fold
    assert read_through(view / "sample000041.cls") == b"%d" % (41 % 7)
    for miss in ["sample000999.jpg", "sample000041.png", "nothere", "nothere.xyz",
                 "@PaxHeader", "sample000041"]:
        assert not (view / miss).exists(), miss
    assert listed(mnt) == before
    # the other fold holds only its own shard
    assert sorted(os.listdir(mnt / "img")) == [f"sample{i:06d}.{e}" for i in range(500, 503)
                                                for e in ("cls", "jpg")]
    info = read_through(view / ".shardfs" / "info.txt").decode()
    lines = read_through(view / ".shardfs" / "samples.jsonl").decode().splitlines()
    assert len(lines) == 75
    assert "samples: 75 " in info, info
    assert "fid 1  img-train-000001.tar" in info
    want = expected([src / "img-train-000000.tar", src / "img-train-000001.tar"])
    assert len(want) == 150
    assert seen(view) == want


@pytest.mark.parametrize("writer", WRITERS)
def test_misses_never_list(mount, tmp_path, writer):
    """Root names the index cannot key (a directory with a dot, no directory
    record; an empty directory, only a record; a pax-renamed non-ASCII name)
    resolve before any listing, and a
    name no member has answers ENOENT without listing, whatever records the
    writer adds (GNU and bsdtar pax, tarfile's @PaxHeader)."""
    work, src = tmp_path / "work", tmp_path / "src"
    src.mkdir()
    files = {"n01.d/x.jpg": b"in dir", "plain.jpg": b"plain", "\u00e9t\u00e9.jpg": b"summer",
             "deep/er/z.cls": b"3"}
    write_tree(work, files)
    (work / "lonely.d").mkdir()
    names = [*files, "lonely.d"]
    if writer == "gnu":
        subprocess.run(["tar", "--format=posix", "-cf", str(src / "f_0.tar"), *names],
                       cwd=work, check=True, timeout=60)
    else:
        tar_with(writer, src / "f_0.tar", work, names)
    index(src, "f")
    mnt = mount(src)
    view = mnt / "f"
    before = listed(mnt)
    for miss in ["nothere.jpg", "nothere", "n01.e", "plain.cls", "\u00e9t\u00e9.cls"]:
        assert not (view / miss).exists(), miss
    assert read_through(view / "plain.jpg") == b"plain"
    assert listed(mnt) == before
    assert read_through(view / "\u00e9t\u00e9.jpg") == b"summer"
    assert read_through(view / "n01.d" / "x.jpg") == b"in dir"
    assert os.listdir(view / "lonely.d") == []
    assert seen(view) == expected([src / "f_0.tar"])


@pytest.mark.parametrize("writer", WRITERS)
def test_root_dir_only_in_ustar_prefix(mount, tmp_path, writer):
    """A member whose name field holds no '/' (its directories are all in
    the ustar prefix) still makes its root directory found by name before
    any listing: the first miss reads that header in full."""
    work, src = tmp_path / "work", tmp_path / "src"
    src.mkdir()
    rel = "pre/" + "p" * 100 + "/x.txt"
    write_tree(work, {rel: b"prefixed", "flat.txt": b"flat"})
    tar = src / "f_0.tar"
    if writer == "tarfile":
        with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as t:
            for n in (rel, "flat.txt"):
                t.add(work / n, arcname=n)
    else:
        tool = ["tar", "--format=ustar"] if writer == "gnu" else ["bsdtar", "--format", "ustar"]
        subprocess.run([*tool, "-cf", str(tar), rel, "flat.txt"], cwd=work, check=True, timeout=60)
    with tarfile.open(tar) as t:
        hdr = t.getmember(rel)
    raw = tar.read_bytes()[hdr.offset:hdr.offset + 512]
    assert raw[:6] == b"x.txt\0" and raw[345:348] == b"pre", raw[:8]
    index(src, "f")
    mnt = mount(src)
    view = mnt / "f"
    before = listed(mnt)
    assert not (view / "nothere.txt").exists()
    assert listed(mnt) == before
    assert (view / "pre").is_dir()
    assert read_through(view / rel) == b"prefixed"
    assert seen(view) == expected([tar])


# ---- deep paths ----------------------------------------------------------------

def test_path_of_32700_levels(mount, tmp_path):
    """A 64 KiB pax path of 32,700 levels: each directory keeps its own
    name, not its path, so memory stays linear."""
    src = tmp_path / "src"
    src.mkdir()
    deep = "a/" * 32700 + "f.txt"
    with tarfile.open(src / "f_0.tar", "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in ((deep, b"at the bottom"), ("top.txt", b"top")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    index(src, "f")
    # the tool resolves the whole path in one walk; measure its peak memory
    t0 = time.monotonic()
    p = subprocess.run(["/usr/bin/time", "-f", "maxrss_kib=%M", str(TOOLS / "shardfs-cat"),
                        str(src / "f.taridx"), deep], capture_output=True, timeout=300)
    err = p.stderr.decode()
    assert p.returncode == 0, err[-2000:]
    assert p.stdout == b"at the bottom"
    # a path copied per level would be 32,700 * 32 KiB = 1 GiB
    maxrss = int(err.rsplit("maxrss_kib=", 1)[1].split()[0])
    assert maxrss < 400 * 1024, maxrss
    assert time.monotonic() - t0 < 240
    mnt = mount(src)
    view = mnt / "f"
    assert sorted(os.listdir(view)) == ["a", "top.txt"]
    # a few levels down through the kernel, then the bottom from the tool
    assert os.listdir(view / "/".join(["a"] * 50)) == ["a"]
    # and the whole way down through the daemon, a directory at a time: no
    # inode keeps its whole path (32,700 of them would hold 1 GiB)
    pid = mount.last.proc.pid
    before = rss_kib(pid)
    fd = os.open(view, os.O_PATH | os.O_DIRECTORY)
    try:
        for _ in range(32700):
            nfd = os.open("a", os.O_PATH | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("f.txt", os.O_RDONLY, dir_fd=fd), "rb") as f:
            assert f.read() == b"at the bottom"
    finally:
        os.close(fd)
    grown = rss_kib(pid) - before
    assert grown < 256 * 1024, f"the daemon grew {grown} KiB walking 32,700 levels"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


# ---- the first lookup's pass over every header, in chunks on two threads ------------------

def header_rows(tar):
    """The rows an indexer makes of a tar: one per header block, records
    included (docs/specs/taridx.md §7.2)."""
    data, off, n = tar.read_bytes(), 0, 0
    while off + 512 <= len(data) and data[off:off + 512] != bytes(512):
        size = int(data[off + 124:off + 136].split(b"\0")[0].strip() or b"0", 8)
        off += 512 + -(-size // 512) * 512
        n += 1
    return n


def pax_renamed(path, field, data):
    """A pax 'x' record giving `path` to the ustar header after it, whose
    name field says `field`, and that member's data."""
    rec = f" path={path}\n".encode()
    n = len(rec) + 1
    while len(str(n)) + len(rec) != n:
        n += 1
    body = str(n).encode() + rec
    x = tarfile.TarInfo("././@PaxHeader")
    x.type, x.size = tarfile.XHDTYPE, len(body)
    ti = tarfile.TarInfo(field)
    ti.size = len(data)
    pad = tarfile.NUL * (-len(body) % 512), tarfile.NUL * (-len(data) % 512)
    return (x.tobuf(tarfile.USTAR_FORMAT) + body + pad[0] + ti.tobuf(tarfile.USTAR_FORMAT) +
            data + pad[1])


def fillers(first, count):
    out = b""
    for i in range(first, first + count):
        data = b"filler %d\n" % i
        ti = tarfile.TarInfo(f"k{i:05d}.bin")
        ti.size = len(data)
        out += ti.tobuf(tarfile.USTAR_FORMAT) + data + tarfile.NUL * (-len(data) % 512)
    return out


def test_first_lookup_equals_listing_across_chunks(mount, tmp_path):
    """The first lookup's pass over a fold's headers takes rows in chunks of
    4096 on two threads (tx_fold.c, find_unkeyed): row 4096, the second
    chunk's first, is the member a pax record at row 4095 renames to
    `a.txt`, an earlier member's name. Shards by GNU tar (long name, directory with
    a key's name, empty directory, symlink, hard link, empty file), tarfile
    (that renamed member; a non-ASCII name, `?` in its name field) and
    bsdtar (pax long name, hard link, a file replacing an empty one),
    indexed by shardfs-taridx: every path reads the same lookup-first (a
    fresh fold) as listing-first (another), and both as tarfile reads the
    shards in fid order."""
    src, w0, w2 = tmp_path / "src", tmp_path / "w0", tmp_path / "w2"
    src.mkdir()
    long0 = "l" * 120 + ".txt"
    write_tree(w0, {"a.txt": b"OLD\n", "empty.txt": b"", "?.txt": b"Q\n", "d.txt/x.txt": b"X\n",
                    long0: b"long\n"})
    (w0 / "emptydir.bin").mkdir()
    os.symlink("a.txt", w0 / "sym.txt")
    os.link(w0 / "a.txt", w0 / "hard.txt")
    long2 = "m" * 130 + ".bin"
    write_tree(w2, {"c.txt": b"C\n", "empty.txt": b"now full\n", long2: b"long too\n",
                    "dd.bin/y.bin": b"Y\n"})
    os.link(w2 / "c.txt", w2 / "h2.txt")
    s0, s1, s2 = (tmp_path / f"s{i}.tar" for i in range(3))
    tar_with("gnu", s0, w0, ["a.txt", "empty.txt", "?.txt", "d.txt", "emptydir.bin", "sym.txt",
                             "hard.txt", long0])
    tar_with("bsdtar", s2, w2, ["c.txt", "empty.txt", long2, "dd.bin", "h2.txt"])
    a, c = header_rows(s0), header_rows(s2)
    # tarfile's shard: the non-ASCII member (2 rows), f1 fillers, the
    # renamed member (2 rows), f2 fillers; so that row 4096 is the renamed
    # member's header and there are more than two chunks
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        ti = tarfile.TarInfo("\u00e9.txt")
        ti.size = 6
        t.addfile(ti, io.BytesIO(b"accent"))
    head = buf.getvalue()[:-1024].rstrip(b"\0")
    head += b"\0" * (-len(head) % 512)
    f1 = 4093 - a
    f2 = 8300 - (a + 2 + f1 + 2 + c)
    renamed_at = len(head) + 512 * 2 * f1
    s1.write_bytes(head + fillers(0, f1) + pax_renamed("a.txt", "b.txt", b"NEW\n") +
                   fillers(f1, f2) + tarfile.NUL * 1024)
    n = a + 2 + f1 + 2 + f2 + c
    assert n > 8192 and header_rows(s1) == 2 + f1 + 2 + f2
    for fold in ("fa", "fb"):
        for i, s in enumerate((s0, s1, s2)):
            shutil.copy(s, src / f"{fold}_{i}.tar")
        index(src, fold)
    # the index's row 4096 is the renamed member's header
    ix = (src / "fa.taridx").read_bytes()
    assert int.from_bytes(ix[24:32], "little") == n
    row = int.from_bytes(ix[48:56], "little") + 32 * 4096
    assert ix[row:row + 2] == b"\1\0"
    assert int.from_bytes(ix[row + 2:row + 10], "little") == renamed_at + 1024
    want = expected([s0, s1, s2])
    assert want["a.txt"] == b"NEW\n" and want["hard.txt"] == b"OLD\n" and "b.txt" not in want
    dirs = {os.path.dirname(p) for p in want} - {""} | {"emptydir.bin"}
    mnt = mount(src)
    first = mnt / "fa"
    # names the index keys, hits and misses, answer without a listing; then
    # a.txt, which the renamed member takes (found in the second chunk)
    keyed = ["c.txt", "empty.txt", "?.txt", "sym.txt", "k00000.bin", f"k{f1 + f2 - 1:05d}.bin",
             "b.txt", "nope.txt"]
    before = listed(mnt)
    rest = sorted(({p.split("/")[0] for p in want} | dirs | set(want)) - set(keyed) - {"a.txt"})
    for i, name in enumerate(keyed + ["a.txt"] + rest):
        if i == len(keyed):
            assert listed(mnt) == before
        p = first / name
        if name in want and isinstance(want[name], tuple):
            assert os.readlink(p) == want[name][1], name
        elif name in want:
            assert p.is_file() and not p.is_symlink(), name
            assert p.stat().st_size == len(want[name]), name
            assert read_through(p) == want[name], name
        elif name in dirs:
            assert p.is_dir() and not p.is_symlink(), name
        else:
            assert not os.path.lexists(p), name
    assert seen(mnt / "fb") == want == seen(first)
    for view in (first, mnt / "fb"):
        assert {os.path.relpath(r, view) for r, _, _ in os.walk(view)} - {"."} == dirs


def fold_of_dirs(tmp_path, n):
    """A fold `f` of one tar whose n members d<i>/x.bin, each holding its
    number and a newline, are each in a directory of its own: n root names
    the index cannot key."""
    src = tmp_path / "src"
    src.mkdir()
    with tarfile.open(src / "f_0.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(n):
            data = b"%d\n" % i
            ti = tarfile.TarInfo(f"d{i:05d}/x.bin")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    index(src, "f")
    return src


def test_first_lookup_charges_the_names_it_keeps(mount, tmp_path):
    """The root names the index cannot key, which the first lookup's pass
    keeps for the fold's life (8 bytes each, each once), are charged to the
    budget: 9,000 members each in a directory of its own (two chunks and
    more, so both threads find some) add exactly 72,000 bytes to what the
    cache says is charged, and the names still answer."""
    n = 9000
    src = fold_of_dirs(tmp_path, n)
    mnt = mount(src)
    view = mnt / "f"
    assert (view / ".shardfs").is_dir()
    before = mount_stats(mnt)["cache"]["bytes_charged"]
    assert not os.path.lexists(view / "nope.bin")
    assert mount_stats(mnt)["cache"]["bytes_charged"] - before == 8 * n
    assert listed(mnt) == 0
    assert read_through(view / "d00000" / "x.bin") == b"0\n"
    assert read_through(view / f"d{n - 1:05d}" / "x.bin") == b"%d\n" % (n - 1)


def test_first_lookup_pass_over_a_truncated_tar(mount, tmp_path):
    """A tar of a fold cut to a quarter after its view opened, before the
    first lookup: the pass over the headers (10,000 rows, so both threads)
    meets the tar's early end through its copies (a read of the mapping
    there would be SIGBUS), and a hit and a miss alike fail with EIO and an
    error naming the tar; the daemon lives on. Ten tars, more than the
    eight a view checks at each lookup (sf_mapcheck.c), so the cut is met
    by the pass itself, not by a check before it."""
    src = tmp_path / "src"
    src.mkdir()
    for s in range(10):
        with tarfile.open(src / f"f_{s}.tar", "w", format=tarfile.USTAR_FORMAT) as t:
            for i in range(s * 1000, (s + 1) * 1000):
                data = b"%d\n" % i
                ti = tarfile.TarInfo(f"k{i:05d}.bin")
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    index(src, "f")
    mnt = mount(src)
    view = mnt / "f"
    cut = src / "f_9.tar"
    size = cut.stat().st_size
    # an open file keeps the view (and its mappings) open; opening it looks
    # up no member, and lists nothing, so the pass has not run
    with open(view / ".shardfs" / "info.txt", "rb"):
        os.truncate(cut, size // 4)
        for name in ("k00000.bin", "nope.bin"):
            with pytest.raises(OSError) as e:
                os.stat(view / name)
            assert e.value.errno == errno.EIO, name
        errors = (mnt / ".shardfs" / "errors").read_text()
    assert f"f_9.tar: tar headers: the file ends at byte {size // 4}, was {size} bytes " \
        "(truncated)" in errors, errors
    assert mount.last.proc.poll() is None


def rchar(pid):
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_refused_pass_is_remembered(mount, tmp_path):
    """When the budget cannot hold the root names the first lookup's pass
    finds, the lookup fails with the reason, and later lookups fail with it
    without reading the tars again until the cache frees something: the
    daemon's bytes read (rchar) grow by the tar's size at the first, by
    next to nothing at the second."""
    src = fold_of_dirs(tmp_path, 9000)
    size = (src / "f_0.tar").stat().st_size
    mnt = mount(src, "--cache-size", "100K")
    pid = mount.last.proc.pid
    view = mnt / "f"
    # an open file keeps the view open between the lookups
    with open(view / ".shardfs" / "info.txt", "rb"):
        got = []
        for _ in range(2):
            before = rchar(pid)
            with pytest.raises(OSError) as e:
                os.stat(view / "nope.bin")
            assert e.value.errno == errno.EIO
            got.append(rchar(pid) - before)
        errors = (mnt / ".shardfs" / "errors").read_text()
    assert "the root names its index cannot key" in errors, errors
    assert got[0] >= size // 2 and got[1] < size // 20, (got, size)
