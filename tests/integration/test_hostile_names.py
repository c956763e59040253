"""Hostile names from inside files (DESIGN §3.3): tar members named with
`..`, absolute paths, newlines, control bytes, `%`, 300-byte names, invalid
UTF-8 and duplicates, indexed with shardfs-taridx; and the tet writer's
corpus with hostile dataset names. In every view: each entry's name is at
most 255 bytes with no NUL, `/` or control byte, no directory lists a name
twice, every path resolves inside its view directory, and every member's
bytes are served under exactly one name."""
import io
import os
import subprocess
import tarfile
from pathlib import Path

from conftest import TOOLS, WRITERS

BAD = [b"..", b"../../etc/passwd", b"/abs/olute", b"new\nline", b"tab\tcr\r",
       b"pct%2F%", b"back\\slash", b"\xff\xfe invalid utf8", b"x" * 300, b"dup", b"dup",
       b"a/../../b", b"./.", b"del\x7f", b".shardfs"]


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


def check_tree(view):
    """The §3.3 invariants over every entry under a view directory."""
    real_view = os.path.realpath(view)
    for dirpath, dirnames, filenames in os.walk(view):
        names = [os.fsencode(n) for n in dirnames + filenames]
        assert len(names) == len(set(names)), dirpath
        for n in names:
            assert 0 < len(n) <= 255, n
            assert n not in (b".", b".."), n
            assert not any(c < 0x20 or c in (0x2F, 0x7F) for c in n), n
            p = os.path.join(dirpath, os.fsdecode(n))
            if not os.path.islink(p):
                assert os.path.realpath(p).startswith(real_view + os.sep), p


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
    for dirpath, _, filenames in os.walk(view):
        for n in filenames:
            b = (Path(dirpath) / n).read_bytes()
            served[b] = served.get(b, 0) + 1
    # every member is served exactly once (the two "dup" members differ by index)
    assert served == payloads
    assert not (tmp_path / "etc").exists() and not Path("/abs").exists()


def test_hostile_dataset_names(tmp_path, mount):
    src = tmp_path / "src"
    subprocess.run(["/usr/bin/python3", str(WRITERS / "tet_writer.py"), "--corpus", str(src)],
                   check=True, capture_output=True, timeout=300)
    mnt = mount(src)
    views = [p for p in mnt.iterdir() if p.is_dir() and (p / ".shardfs").is_dir()]
    assert views
    for v in views:
        check_tree(v)
