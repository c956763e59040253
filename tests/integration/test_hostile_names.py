"""Hostile names from inside files (docs/design.md §3.3): tar members named with
`..`, absolute paths, newlines, control bytes, `%`, 300-byte names, a pax
path of over 4 KiB (many components, one of them over-long), invalid UTF-8
and duplicates, indexed with shardfs-taridx; and the tet writer's corpus
with hostile dataset names. In every view: each entry's name is at most 255
bytes with no NUL, `/` or control byte, no directory lists a name twice,
every path resolves inside its view directory, and every member's bytes are
served under exactly one name. Trees are walked through directory file
descriptors, since the deepest paths are longer than the kernel's PATH_MAX."""
import io
import os
import stat
import subprocess
import tarfile

import xxhash

from conftest import TOOLS, WRITERS

# over 4 KiB of path: 36 directories of 114 bytes, and one whose 198th byte
# is a '%', so the cut at 200 bytes must stop before its %25
LONG_DIRS = [b"d%02d-" % i + b"y" * 110 for i in range(36)]
OVERLONG = b"z" * 197 + b"%" + b"w" * 300
LONG = b"/".join(LONG_DIRS[:18] + [OVERLONG] + LONG_DIRS[18:] + [b"leaf"])
BAD = [b"..", b"../../etc/passwd", b"/abs/olute", b"new\nline", b"tab\tcr\r",
       b"pct%2F%", b"back\\slash", b"\xff\xfe invalid utf8", b"x" * 300, b"dup", b"dup",
       b"a/../../b", b"./.", b"del\x7f", b".shardfs", LONG]


def write_tar(path):
    """One tar whose member names are BAD (pax headers carry the long and
    binary ones); returns {payload: count of members with it}."""
    payloads = {}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as t:
        for i, raw in enumerate(BAD):
            name = raw.decode("utf-8", "surrogateescape") + f".{i}.bin"
            data = f"payload {i}\n".encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
            payloads[data] = payloads.get(data, 0) + 1
    return payloads


def shown_component(raw):
    """A name as docs/design.md §3.3 shows it (no duplicates here): escaped, and
    over 255 bytes cut to at most 200 without splitting a %XX, plus '~' and
    the XXH64 of the raw name."""
    esc = [b"%%%02X" % c if c in b"%/\\" or c < 0x20 or c == 0x7F else bytes([c]) for c in raw]
    out = b"".join(esc)
    if out in (b"", b".", b".."):
        return out + b"#1"
    if len(out) <= 255:
        return out
    cut = b""
    for e in esc:
        if len(cut) + len(e) > 200:
            break
        cut += e
    return cut + b"~" + xxhash.xxh64(raw).hexdigest().encode()


def read_deep(view, path):
    """Reads view/path one component at a time through directory fds."""
    fd = os.open(view, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for comp in path.split(b"/")[:-1]:
            nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(path.split(b"/")[-1], "rb", opener=lambda n, fl: os.open(n, fl, dir_fd=fd)) as f:
            return f.read()
    finally:
        os.close(fd)


def check_tree(view):
    """The §3.3 invariants over every entry under a view directory: names a
    directory fd resolves without leaving it, on the view's file system."""
    dev = os.stat(view).st_dev
    for dirpath, dirnames, filenames, dfd in os.fwalk(view):
        names = [os.fsencode(n) for n in dirnames + filenames]
        assert len(names) == len(set(names)), dirpath
        for n in names:
            assert 0 < len(n) <= 255, n
            assert n not in (b".", b".."), n
            assert not any(c < 0x20 or c in (0x2F, 0x7F) for c in n), n
            st = os.stat(n, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                assert st.st_dev == dev, (dirpath, n)


def test_hostile_member_names(tmp_path, mount):
    src = tmp_path / "src"
    src.mkdir()
    payloads = write_tar(src / "evil_0000.tar")
    r = subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src), "evil"],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    mnt = mount(src)
    view = mnt / "evil"
    check_tree(view)
    served = {}
    for _, _, filenames, dfd in os.fwalk(view):
        for n in filenames:
            with open(n, "rb", opener=lambda p, fl: os.open(p, fl, dir_fd=dfd)) as f:
                b = f.read()
            served[b] = served.get(b, 0) + 1
    # every member is served exactly once (the two "dup" members differ by index)
    assert served == payloads
    assert not (tmp_path / "etc").exists() and not os.path.exists("/abs")
    # the long pax path shows at its escaped, cut components
    i = BAD.index(LONG)
    shown = b"/".join(shown_component(c) for c in (LONG + b".%d.bin" % i).split(b"/"))
    assert read_deep(view, shown) == b"payload %d\n" % i
    rep = (view / ".shardfs" / "verify").read_text()
    assert rep.startswith("status: ok\n") and "error:" not in rep, rep


def test_hostile_dataset_names(tmp_path, mount):
    src = tmp_path / "src"
    subprocess.run(["/usr/bin/python3", str(WRITERS / "tet_writer.py"), "--corpus", str(src)],
                   check=True, capture_output=True, timeout=300)
    mnt = mount(src)
    views = [p for p in mnt.iterdir() if p.is_dir() and (p / ".shardfs").is_dir()]
    assert views
    for v in views:
        check_tree(v)
