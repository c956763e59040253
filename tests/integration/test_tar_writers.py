"""Tars as the real writers write them (docs/formats/taridx.md, "Tars as
their writers write them"): archives written at test time by GNU tar (every
--format, sparse files in every --sparse-version and old GNU), bsdtar
(default, v7, ustar, pax; files with holes) and Python's tarfile (GNU, PAX,
USTAR), indexed with shardfs-taridx and mounted. Every member read through
the mount must equal what tarfile extracts: bytes, symlink targets,
directories, and nothing the tar does not hold. Members of 8 GiB and more
are holes on disk, so the test stays small and fast."""
import io
import os
import shutil
import subprocess
import tarfile

import pytest

from conftest import TOOLS
from test_taridx import shown_path

BIG = 9 << 30          # the sparse input file's size (> 8 GiB)
HUGE = (8 << 30) + 1000  # the non-sparse member written with a hole for payload
READ_WHOLE = 64 << 20  # members larger than this are compared at both ends


def data(n, seed):
    return bytes((i * 131 + seed * 7 + i // 251) % 256 for i in range(n))


def write_tree(root):
    """The trees the writers archive: `short` fits every format (paths under
    100 bytes), `mid` needs the ustar prefix, `long` needs GNU or pax
    records, `holes` holds sparse files."""
    s = root / "short"
    (s / "sub" / "dir").mkdir(parents=True)
    # empty directories: the directory records alone make them
    (s / "emptydir" / "inner").mkdir(parents=True)
    (s / "a.txt").write_bytes(b"alpha\n")
    (s / "empty.bin").write_bytes(b"")
    (s / "sub" / "dir" / "deep.bin").write_bytes(data(3000, 1))
    (s / "sub" / "block.bin").write_bytes(data(1024, 2))
    os.link(s / "a.txt", s / "hard.txt")
    os.symlink("a.txt", s / "sym")
    os.symlink("sub/dir", s / "dirlink")
    with open(os.path.join(os.fsencode(s), b"caf\xe9-\xff.bin"), "wb") as f:
        f.write(b"not utf-8 name")
    (s / "new\nline.txt").write_bytes(b"a newline in the name\n")
    m = root / "mid" / ("p" * 60) / ("q" * 60)
    m.mkdir(parents=True)
    (m / "prefixed.txt").write_bytes(data(700, 3))
    lg = root / "long" / ("d" * 120)
    lg.mkdir(parents=True)
    (lg / ("n" * 150 + ".dat")).write_bytes(data(5000, 4))
    os.link(lg / ("n" * 150 + ".dat"), lg / ("h" * 130 + ".dat"))
    os.symlink("../" + "t" * 150, lg / "longsym")
    with open(os.path.join(os.fsencode(lg), b"\xff" * 110 + b".raw"), "wb") as f:
        f.write(b"long and not utf-8")
    h = root / "holes"
    h.mkdir()
    with open(h / "many.bin", "wb") as f:
        # 30 pieces: more than an old GNU header holds, so extension blocks
        for i in range(30):
            f.seek(i * 65536 + 8192)
            f.write(data(4096, i))
        f.truncate(30 * 65536 + 12288)
    with open(h / "tailhole.bin", "wb") as f:
        f.write(data(5000, 9))
        f.truncate(1 << 20)
    with open(h / "allhole.bin", "wb") as f:
        f.truncate(1 << 20)
    with open(h / "big.bin", "wb") as f:
        f.write(b"head")
        f.seek(BIG - 3)
        f.write(b"end")
    (h / "after.txt").write_bytes(b"after the sparse ones\n")


def huge_tar(path, fmt):
    """A tar whose first member has HUGE bytes, written with tarfile's own
    header (PAX: the size in a pax record and 0 in the header; GNU: base-256),
    its payload a hole on disk but for its last 10 bytes, then one member."""
    enc = ("utf-8", "surrogateescape")
    ti = tarfile.TarInfo("huge.bin")
    ti.size = HUGE
    with open(path, "wb") as f:
        f.write(ti.tobuf(fmt, *enc))
        start = f.tell()
        f.seek(start + HUGE - 10)
        f.write(b"0123456789")
        f.seek(start + HUGE + (-HUGE % 512))
        after = tarfile.TarInfo("after.txt")
        after.size = 6
        f.write(after.tobuf(fmt, *enc) + b"after\n" + bytes(506) + bytes(1024))


def pax_size_tar(path):
    """A pax size record (999) that differs from a non-zero header size (684):
    readers take the record."""
    ti = tarfile.TarInfo("pos.bin")
    ti.size = 684
    ti.pax_headers = {"size": "999"}
    with open(path, "wb") as f:
        f.write(ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict"))
        f.write(data(999, 5) + bytes(-999 % 512))
        nxt = tarfile.TarInfo("next.txt")
        nxt.size = 4
        f.write(nxt.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict") + b"next" + bytes(508) + bytes(1024))


def run(*cmd, cwd=None):
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)


def gnu(fmt, *extra):
    return lambda out, root, names: run("tar", f"--format={fmt}", *extra, "-cf", str(out), *names, cwd=root)


def bsd(*extra):
    return lambda out, root, names: run("bsdtar", *extra, "-cf", str(out), *names, cwd=root)


def py(fmt, **kw):
    def write(out, root, names):
        with tarfile.open(out, "w", format=fmt, encoding="utf-8", errors="surrogateescape", **kw) as t:
            for n in names:
                t.add(root / n, arcname=n)
    return write


SPARSE = ("-S", "--hole-detection=seek")
# fold name -> (writer, trees)
WRITERS = {
    "gnuv7": (gnu("v7"), ["short"]),
    "gnuustar": (gnu("ustar"), ["short", "mid"]),
    "gnuoldgnu": (gnu("oldgnu"), ["short", "mid", "long"]),
    "gnugnu": (gnu("gnu"), ["short", "mid", "long"]),
    "gnuposix": (gnu("posix"), ["short", "mid", "long"]),
    "gnusparsegnu": (gnu("gnu", *SPARSE), ["holes"]),
    "gnusparseoldgnu": (gnu("oldgnu", *SPARSE), ["holes"]),
    "gnusparse00": (gnu("posix", "--sparse-version=0.0", *SPARSE), ["holes"]),
    "gnusparse01": (gnu("posix", "--sparse-version=0.1", *SPARSE), ["holes"]),
    "gnusparse10": (gnu("posix", "--sparse-version=1.0", *SPARSE), ["holes"]),
    "bsddefault": (bsd(), ["short", "mid", "long", "holes"]),
    "bsdv7": (bsd("--format", "v7"), ["short"]),
    "bsdustar": (bsd("--format", "ustar"), ["short", "mid"]),
    "bsdpax": (bsd("--format", "pax"), ["short", "mid", "long", "holes"]),
    "pygnu": (py(tarfile.GNU_FORMAT), ["short", "mid", "long"]),
    "pypax": (py(tarfile.PAX_FORMAT), ["short", "mid", "long"]),
    "pyustar": (py(tarfile.USTAR_FORMAT), ["short", "mid"]),
    # a global header first, as git archive writes one
    "pyglobal": (py(tarfile.PAX_FORMAT, pax_headers={"comment": "global"}), ["short"]),
}
MADE = {"hugepax": lambda out: huge_tar(out, tarfile.PAX_FORMAT),
        "hugegnu": lambda out: huge_tar(out, tarfile.GNU_FORMAT),
        "paxsize": pax_size_tar}


def index(src, fold):
    p = subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src), fold], capture_output=True)
    return p


@pytest.fixture(scope="module")
def folds(tmp_path_factory):
    """One source directory holding a fold per writer and format."""
    root = tmp_path_factory.mktemp("trees")
    write_tree(root)
    src = tmp_path_factory.mktemp("src")
    for fold, (write, trees) in WRITERS.items():
        write(src / f"{fold}_0000.tar", root, trees)
    for fold, make in MADE.items():
        make(src / f"{fold}_0000.tar")
    # members of 8 and 9 GiB, yet the tars are small on disk
    assert sum(f.stat().st_blocks * 512 for f in src.iterdir()) < 64 << 20
    results = {fold: index(src, fold) for fold in list(WRITERS) + list(MADE)}
    yield src, results
    shutil.rmtree(root)


def expected(tar):
    """{shown path: (kind, value)} as tarfile extracts the tar: files (and
    hard links) with their bytes, or for large ones their size and both
    ends; symlinks with their targets; directories. The later of two
    equal paths wins."""
    out = {}
    with tarfile.open(tar, encoding="utf-8", errors="surrogateescape") as t:
        for m in t.getmembers():
            path = shown_path(m.name)
            if m.isreg() or m.islnk():
                f = t.extractfile(m)
                size = m.size if m.isreg() else t._find_link_target(m).size
                if size > READ_WHOLE:
                    head = f.read(4096)
                    f.seek(size - 4096)
                    out[path] = ("big", (size, head, f.read(4096)))
                else:
                    out[path] = ("file", f.read())
            elif m.issym():
                out[path] = ("link", m.linkname)
            elif m.isdir():
                out[path] = ("dir", None)
    # a directory's path exists once anything is inside it
    for path in list(out):
        parts = path.split("/")
        for i in range(1, len(parts)):
            out.setdefault("/".join(parts[:i]), ("dir", None))
    return out


def shown(view):
    """{path: kind} of everything the fold view lists, .shardfs aside."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(view):
        rel = os.path.relpath(dirpath, view)
        for n in dirnames + filenames:
            p = n if rel == "." else f"{rel}/{n}"
            full = os.path.join(dirpath, n)
            out[p] = "link" if os.path.islink(full) else "dir" if os.path.isdir(full) else "file"
    return out


def check_fold(view, tar):
    want = expected(tar)
    got = shown(view)
    # every directory, empty ones too
    assert {p: ("file" if k == "big" else k) for p, (k, _) in want.items()} == got
    for p, (kind, val) in want.items():
        full = view / p
        if kind == "file":
            with open(full, "rb") as f:
                assert f.read() == val, p
        elif kind == "big":
            size, head, tail = val
            with open(full, "rb") as f:
                assert os.fstat(f.fileno()).st_size == size, p
                assert os.pread(f.fileno(), 4096, 0) == head, p
                assert os.pread(f.fileno(), 4096, size - 4096) == tail, p
        elif kind == "link":
            assert os.readlink(full) == val, p
    return want


@pytest.mark.parametrize("fold", list(WRITERS) + list(MADE))
def test_members_as_tarfile_reads_them(mount, folds, fold):
    folds, results = folds
    assert results[fold].returncode == 0, results[fold].stderr
    mnt = mount(folds)
    want = check_fold(mnt / fold, folds / f"{fold}_0000.tar")
    assert (mnt / fold / ".shardfs" / "verify").read_text().startswith("status: ok\n")
    trees = WRITERS.get(fold, (None, []))[1]
    # the cases each fold exists for did show up (so a writer changing its
    # habits cannot make this test vacuous)
    if "short" in trees:
        assert want["short/emptydir/inner"][0] == "dir"
        assert os.listdir(mnt / fold / "short" / "emptydir" / "inner") == []
    if "holes" in trees:
        assert want["holes/many.bin"][0] == "file" and want["holes/big.bin"][1][0] == BIG
    if "long" in trees:
        assert "long/" + "d" * 120 + "/longsym" in want
    if fold in MADE:
        assert want["after.txt" if fold != "paxsize" else "next.txt"][0] == "file"


def test_sparse_members_are_zero_copy_and_holes(mount, folds):
    """The sparse member's holes read as zeros and its data comes from the
    tar: a read of a piece returns the bytes stored in the tar, and a file
    of 9 GiB costs nothing to stat."""
    folds, _ = folds
    mnt = mount(folds)
    for fold in ("gnusparsegnu", "gnusparse10", "bsddefault"):
        many = mnt / fold / "holes" / "many.bin"
        with open(many, "rb") as f:
            fd = f.fileno()
            assert os.pread(fd, 8192, 0) == bytes(8192)
            assert os.pread(fd, 4096, 7 * 65536 + 8192) == data(4096, 7)
        st = os.stat(mnt / fold / "holes" / "big.bin")
        assert st.st_size == BIG


def test_huge_members_keep_later_members(folds):
    """A pax size of 8 GiB and more over a 0 in the header, and a base-256
    size, are read: the rows cover the member and the next follows it."""
    folds, _ = folds
    for fold in ("hugepax", "hugegnu"):
        ix = (folds / f"{fold}.taridx").read_bytes()
        n_rows = int.from_bytes(ix[24:32], "little")
        off_arr = int.from_bytes(ix[48:56], "little")
        rows = [ix[off_arr + 32 * i:off_arr + 32 * i + 32] for i in range(n_rows)]
        sizes = [int.from_bytes(r[10:18], "little") for r in rows]
        assert HUGE in sizes and sizes[-1] == 6, (fold, sizes)
    # the tars are holes on disk
    assert os.stat(folds / "hugepax_0000.tar").st_blocks * 512 < 1 << 20


def test_repeated_long_name_records(mount, tmp_path):
    """Two GNU long-name records before one header: the last counts, as
    GNU tar and bsdtar list it."""
    enc = ("utf-8", "strict")
    first = b"first/" + b"f" * 110 + b"\0"
    rec = tarfile.TarInfo("././@LongLink")
    rec.type = tarfile.GNUTYPE_LONGNAME
    rec.size = len(first)
    member = tarfile.TarInfo("last/" + "l" * 110 + ".txt")
    member.size = 5
    with open(tmp_path / "rl_0000.tar", "wb") as f:
        f.write(rec.tobuf(tarfile.GNU_FORMAT, *enc) + first + bytes(-len(first) % 512))
        f.write(member.tobuf(tarfile.GNU_FORMAT, *enc) + b"last\n" + bytes(507) + bytes(1024))
    for lister in (["tar", "-tf"], ["bsdtar", "-tf"]):
        names = subprocess.run(lister + [str(tmp_path / "rl_0000.tar")], capture_output=True,
                               check=True).stdout.split()
        assert names == [member.name.encode()], (lister, names)
    assert index(tmp_path, "rl").returncode == 0
    mnt = mount(tmp_path)
    assert shown(mnt / "rl") == {"last": "dir", member.name: "file"}
    assert (mnt / "rl" / member.name).read_bytes() == b"last\n"


def test_refusals(tmp_path):
    """shardfs-taridx refuses what it cannot index exactly, naming the tar,
    the offset and the cause, and writes nothing: a header whose checksum
    fails, and an extension with a newline (an index joins them by
    newlines)."""
    good = tarfile.TarInfo("a.txt")
    good.size = 3
    bad = tarfile.TarInfo("b.txt")
    bad.size = 3
    hb = bytearray(bad.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict"))
    hb[0] = ord("c")  # the checksum no longer matches
    with open(tmp_path / "ck_0000.tar", "wb") as f:
        f.write(good.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict") + b"abc" + bytes(509))
        f.write(bytes(hb) + b"def" + bytes(509) + bytes(1024))
    nl = tarfile.TarInfo("x.a\nb")
    nl.size = 0
    with open(tmp_path / "nl_0000.tar", "wb") as f:
        f.write(good.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict") + b"abc" + bytes(509))
        f.write(nl.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict") + bytes(1024))
    for fold, why in (("ck", b"ck_0000.tar: cannot index the tar at offset 1024: a header block whose checksum fails"),
                      ("nl", b"nl_0000.tar: header at offset 1024: its name's extension holds a newline")):
        p = index(tmp_path, fold)
        assert p.returncode != 0 and why in p.stderr, p.stderr
        assert not (tmp_path / f"{fold}.taridx").exists()


def test_checksum_failure_hides_member(mount, tmp_path):
    """A header whose checksum fails is never a member: an index built
    before a byte of a header's mtime changed no longer shows it, verify
    says why, and the members around it stay."""
    with tarfile.open(tmp_path / "ck_0000.tar", "w", format=tarfile.USTAR_FORMAT) as t:
        for name, body in (("a.txt", b"first"), ("b.txt", b"second"), ("c.txt", b"third")):
            ti = tarfile.TarInfo(name)
            ti.size = len(body)
            t.addfile(ti, io.BytesIO(body))
    assert index(tmp_path, "ck").returncode == 0
    with open(tmp_path / "ck_0000.tar", "r+b") as f:
        f.seek(1024 + 136)  # b.txt's mtime: its key is untouched
        f.write(b"7")
    mnt = mount(tmp_path)
    assert sorted(os.listdir(mnt / "ck")) == ["a.txt", "c.txt"]
    assert not (mnt / "ck" / "b.txt").exists()
    assert (mnt / "ck" / "c.txt").read_bytes() == b"third"
    rep = (mnt / "ck" / ".shardfs" / "verify").read_text()
    assert rep.startswith("status: failed\n") and "row 1 " in rep and "checksum" in rep, rep
