"""`import shardfs` shows what the mount shows: the same names, kinds,
sizes and bytes for every file of the samples of all five formats, compared
with a real mount of them byte for byte; then the Python API's own promises
(arrays, buffers, errors, closing, threads)."""
import errno
import hashlib
import io
import json
import os
import subprocess
import tarfile
import threading

import numpy as np
import pytest

from conftest import BUILD, REPO, SAMPLES, WRITERS

import shardfs


def mount_tree(top):
    """{relative path: (kind, size, bytes-or-target)} of a mounted tree,
    read through the kernel; the mount's own .shardfs/ left out."""
    out = {}
    for dirpath, dirs, files in os.walk(top):
        rel = os.path.relpath(dirpath, top)
        rel = "" if rel == "." else rel
        if rel == "":
            dirs[:] = [d for d in dirs if d != ".shardfs"]
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            r = f"{rel}/{name}" if rel else name
            if os.path.islink(p):
                out[r] = ("link", 0, os.readlink(p))
            elif os.path.isdir(p):
                out[r] = ("dir", 0, None)
            else:
                with open(p, "rb") as f:
                    data = f.read()
                out[r] = ("file", os.lstat(p).st_size, data)
        # a symlinked directory is listed, not entered
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
    return out


def module_tree(tree):
    out = {}
    for dirpath, dirs, files in tree.walk():
        for name in dirs + files:
            r = f"{dirpath}/{name}" if dirpath else name
            e = tree.stat(r)
            if e.kind == "link":
                out[r] = ("link", 0, e.target)
            elif e.kind == "dir":
                out[r] = ("dir", 0, None)
            else:
                out[r] = ("file", e.size, tree.read(r))
    return out


def test_every_file_of_every_format_reads_as_through_the_mount(samples, mount):
    """All five formats' samples in one directory: the module's Tree of it
    and the mount of it hold the same entries with the same bytes."""
    mnt = mount(samples)
    want = mount_tree(mnt)
    with shardfs.open(samples) as tree:
        got = module_tree(tree)
        # and os.path's questions answered as on the mount, missing paths too
        for path in [*want, "no-such", "taridx/no-such/x", next(iter(want)) + "/x"]:
            on_mnt = mnt / path
            assert (tree.exists(path), tree.isdir(path), tree.isfile(path)) == (
                os.path.lexists(on_mnt), os.path.isdir(on_mnt) and not os.path.islink(on_mnt),
                os.path.isfile(on_mnt) and not os.path.islink(on_mnt)), path
    assert sorted(got) == sorted(want)
    for path in want:
        assert got[path][:2] == want[path][:2], path
        assert got[path][2] == want[path][2], f"{path}: bytes differ"
    files = [p for p in want if want[p][0] == "file"]
    # the views are there, with many parts each
    for fmt, container in SAMPLES.items():
        assert sum(1 for p in files if p.startswith(f"{fmt}/")) > 3, fmt
    assert sum(want[p][1] for p in files) > 100_000


def test_each_container_opens_into_its_view_in_listing_order(samples, mount):
    """View of each format's container: listing order, stat, .shardfs/
    (info.json, verify) as the mount's view directory shows them."""
    mnt = mount(samples)
    for fmt, container in SAMPLES.items():
        src = next(samples.joinpath(fmt).rglob(container))
        mdir = mnt / src.relative_to(samples).with_suffix("")
        with shardfs.open(src) as v:
            assert v.format == ("sidx" if fmt == "shardlake" else fmt)
            assert v.listdir() == os.listdir(mdir), fmt
            for dirpath, dirs, files in v.walk():
                assert v.listdir(dirpath) == os.listdir(mdir / dirpath), (fmt, dirpath)
            for meta in ("info.json", "info.txt", "verify"):
                # the module names the container as it was opened (its path
                # here), the mount relative to SRC
                got = v.read(f".shardfs/{meta}").replace(f"{samples}/".encode(), b"")
                assert got == (mdir / ".shardfs" / meta).read_bytes(), (fmt, meta)
                assert v.stat(f".shardfs/{meta}").size == len(v.read(f".shardfs/{meta}"))
            info = json.loads((mdir / ".shardfs/info.json").read_text())
            assert json.loads(json.dumps(v.info()).replace(f"{samples}/", "")) == info
            assert v.verify().strip(), fmt


def test_npy_parts_are_numpy_arrays_without_copies(samples, mount):
    mnt = mount(samples)
    found = 0
    with shardfs.open(samples) as tree:
        for dirpath, _, files in tree.walk():
            for name in files:
                if not name.endswith(".npy"):
                    continue
                rel = f"{dirpath}/{name}"
                a = tree.array(rel)
                b = np.load(mnt / rel)
                assert a.dtype == b.dtype and a.shape == b.shape, rel
                assert a.tobytes() == b.tobytes(), rel
                assert not a.flags.writeable
                found += 1
    assert found >= 5


def test_buffers_look_into_the_mapping_and_outlive_the_view(samples):
    src = samples / "taridx" / "demo.taridx"
    tar = (samples / "taridx" / "demo_0000.tar").read_bytes()
    with shardfs.open(src) as v:
        want = v.read("000003.txt")
        buf = v.buffer("000003.txt")
        assert buf.obj.mapped  # a stored member: the tar's own pages
        part = v.buffer("000003.txt", 2, 5)
        into = bytearray(len(want) + 4)
        n = v.readinto("000003.txt", memoryview(into)[2:], 0)
    # the view is closed: the buffers still hold their bytes
    assert v.closed
    assert buf.readonly and bytes(buf) == want == b"caption of sample 3\n"
    assert want in tar
    assert bytes(part) == want[2:7]
    assert n == len(want) and into[2:2 + n] == want
    with pytest.raises(ValueError, match="closed"):
        v.read("000003.txt")


def test_errors_name_the_file_and_part(samples, tmp_path):
    src = samples / "taridx" / "demo.taridx"
    with shardfs.open(src) as v:
        with pytest.raises(FileNotFoundError) as e:
            v.read("no/such/member")
        assert "no/such/member" in str(e.value)
        with pytest.raises(IsADirectoryError) as e:
            v.read(".shardfs")
        assert str(src) in str(e.value) and ".shardfs" in str(e.value)
        with pytest.raises(NotADirectoryError):
            v.listdir("000003.txt")
    bad = tmp_path / "bad.tet"
    bad.write_bytes(b"not a tet file at all" * 10)
    with pytest.raises(OSError) as e:
        shardfs.open(bad)
    assert str(bad) in str(e.value) and e.value.errno in (errno.EINVAL, errno.EIO,
                                                           errno.EBADMSG, errno.ENOEXEC)


def test_help_documents_every_public_name_and_its_example_runs(samples, monkeypatch):
    """help(shardfs): every public name has a docstring, and the package's
    example (a doctest) gives what it shows on the taridx writer's sample."""
    import doctest
    for name in shardfs.__all__:
        obj = getattr(shardfs, name)
        assert (obj.__doc__ or "").strip(), f"shardfs.{name} has no docstring"
    monkeypatch.chdir(samples / "taridx")
    failed, tried = doctest.testmod(shardfs, verbose=False, report=True)
    assert tried >= 2 and failed == 0


def test_threads_read_at_once_with_the_gil_released(samples):
    """Eight threads read every tet and tatami part at once, and get what
    one thread reads."""
    paths = []
    for fmt in ("tet", "tatami"):
        src = next(samples.joinpath(fmt).rglob(SAMPLES[fmt]))
        with shardfs.open(src) as v:
            for dirpath, _, files in v.walk():
                paths += [(src, f"{dirpath}/{f}" if dirpath else f) for f in files]
    want = {}
    for src, p in paths:
        with shardfs.open(src) as v:
            want[src, p] = hashlib.sha256(v.read(p)).hexdigest()
    views = {src: shardfs.open(src) for src, _ in paths}
    bad = []

    def reader(k):
        for src, p in paths[k::3] + paths:
            if hashlib.sha256(views[src].read(p)).hexdigest() != want[src, p]:
                bad.append(p)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    for v in views.values():
        v.close()
    assert not bad


def test_large_empty_and_partial_reads(tmp_path, mount):
    """Members past the one-call read size (64 KiB), an empty one, and
    pieces at offsets, as the mount reads them."""
    import io
    import subprocess
    import tarfile
    from conftest import BUILD
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(3)
    sizes = {"big.bin": 200_003, "edge.bin": 65_536, "edge1.bin": 65_537, "empty.bin": 0,
             "small.bin": 17}
    with tarfile.open(src / "t_0000.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for name, n in sizes.items():
            info = tarfile.TarInfo(name)
            info.size = n
            tf.addfile(info, io.BytesIO(rng.bytes(n)))
    subprocess.run([str(BUILD / "tools" / "shardfs-taridx"), "--quiet", str(src), "t"],
                   check=True, timeout=60)
    mnt = mount(src)
    with shardfs.open(src / "t.taridx") as v:
        for name, n in sizes.items():
            want = (mnt / "t" / name).read_bytes()
            assert len(want) == n
            assert v.read(name) == want, name
            assert v.read(name, offset=n // 3) == want[n // 3:], name
            assert v.read(name, 1000, n // 2) == want[n // 2:n // 2 + 1000], name
            assert v.read(name, offset=n + 5) == b""
            assert bytes(v.buffer(name)) == want
            with v.open(name) as f:
                assert f.read() == want
                f.seek(-min(n, 10), io.SEEK_END)
                assert f.read() == want[-10:] if n else f.read() == b""


def test_the_gil_is_let_go_while_a_part_decodes(tmp_path):
    """While the main thread decodes a large zstd chunk (View.buffer: the
    decode and nothing else in one call), a second thread
    counts in Python. Forced GIL switches are off (switch interval 1000 s)
    and the counter lets go of the GIL itself each turn (time.sleep(0)), so
    it can count during the call only if the call let go of the GIL: a call
    holding it sees no count, however the machine is loaded. A call that
    lets go may still see none if the counter is not scheduled in time, so
    a fresh view decodes again, up to 10 times."""
    import sys
    import time
    sys.path.insert(0, str(WRITERS))
    import tet_writer
    rows, cols = 1024, 8192  # 32 MiB of float32, one chunk
    a = np.cumsum(np.random.default_rng(7).standard_normal((rows, cols), dtype=np.float32),
                  axis=1).astype("<f4")
    path = tmp_path / "z.tet"
    tet_writer.write_tet(str(path), [tet_writer.Dataset(b"x", a, (rows, cols), codec="zstd")])
    with shardfs.open(path) as v:
        chunk = max((f"{d}/{f}" if d else f for d, _, fs in v.walk() for f in fs),
                    key=lambda p: v.stat(p).size)
    assert shardfs.open(path).stat(chunk).size >= a.nbytes

    count, stop = [0], threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1
            time.sleep(0)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    t = threading.Thread(target=counter)
    t.start()
    try:
        while count[0] == 0:
            time.sleep(0.01)
        seen = []
        for _ in range(10):
            with shardfs.open(path) as v:
                before = count[0]
                data = v.buffer(chunk)  # the decode alone: no copy after it
                seen.append(count[0] - before)
                assert len(data) >= a.nbytes
                data.release()
            if seen[-1]:
                break
    finally:
        stop.set()
        sys.setswitchinterval(old)
        t.join(timeout=60)
    assert any(seen), f"no count while {len(seen)} decodes ran: the GIL was held"


def test_a_source_changed_in_place_fails_reads(samples, tmp_path):
    """A tar of a fold rewritten in place (same bytes, a new mtime) under an
    open View: reads raise EIO once the library has looked (at most 10 ms
    after the change; polled here with a deadline), and keep failing."""
    import shutil
    import time
    for f in (samples / "taridx").iterdir():
        shutil.copy(f, tmp_path / f.name)
    with shardfs.open(tmp_path / "demo.taridx") as v:
        want = v.read("000003.txt")
        tar = next(p for p in sorted(tmp_path.glob("demo_*.tar")) if want in p.read_bytes())
        later = time.time_ns() + 10**9
        os.utime(tar, ns=(later, later))
        deadline = time.monotonic() + 30
        while True:
            try:
                assert v.read("000003.txt") == want  # not looked again yet
            except OSError as e:
                assert e.errno == errno.EIO and "changed in place" in str(e), e
                break
            assert time.monotonic() < deadline, "the change was never noticed"
            time.sleep(0.005)
        with pytest.raises(OSError) as e:
            v.read("000003.txt")
        assert e.value.errno == errno.EIO


def test_tree_shows_the_views_beside_tars(tmp_path, mount):
    """Issue 39: shardfs.open(DIR) shows a view beside a plain .tar, as the
    mount does, and none beside a tar a fold takes as its shard
    ("<fold>_<S>.tar", or WebDataset's "<fold>-<S>.tar" where the fold has
    no "_" shard); a view whose name is taken is "<file name>.d"."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "x").mkdir()

    def tar(path, members):
        with tarfile.open(path, "w") as t:
            for name, data in members.items():
                ti = tarfile.TarInfo(name)
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))

    tar(src / "t.tar", {"a.txt": b"alone\n", "d/b.txt": b"in a directory\n"})
    tar(src / "x.tar", {"c.txt": b"its view is x.tar.d\n"})
    tar(src / "sub" / "f_0.tar", {"s.cls": b"1\n"})
    tar(src / "sub" / "w-0.tar", {"u.cls": b"2\n"})
    for fold in ("f", "w"):
        p = subprocess.run([str(BUILD / "tools" / "shardfs-taridx"), "--quiet", str(src / "sub"),
                            fold], capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
    mnt = mount(src)
    want = mount_tree(mnt)
    assert {"t/a.txt", "t/d/b.txt", "x.tar.d/c.txt", "sub/f/s.cls", "sub/w/u.cls"} <= set(want)
    assert "sub/f_0" not in want and "sub/w-0" not in want
    with shardfs.open(src) as tree:
        got = module_tree(tree)
    assert sorted(got) == sorted(want)
    for path in want:
        assert got[path] == want[path], path


def test_damaged_container_reads_as_through_the_mount(tmp_path, mount):
    """A .tsumugi whose forward region fails its CRC (issue 39): each path of
    its view gives the same bytes, or fails with the same errno, through the
    module as through the mount. docs.jsonl, which that region makes, fails
    with EIO on both: through the module it read as an empty file."""
    src = tmp_path / "src"
    src.mkdir()
    data = bytearray((REPO / "tests" / "fixtures" / "tsumugi" / "gold_prod.tsumugi").read_bytes())
    data[30000] ^= 0x55  # inside the forward region, the fixture's largest
    (src / "a.tsumugi").write_bytes(bytes(data))
    mnt = mount(src)

    def outcome(call):
        try:
            return call()
        except OSError as e:
            return e.errno

    paths = ["docs.jsonl", "features.csv", "features.npy", "docs", "regions"]
    paths += [f"regions/{n}" for n in os.listdir(mnt / "a" / "regions")]
    with shardfs.open(src / "a.tsumugi") as v:
        for p in paths:
            on_mnt = mnt / "a" / p
            if os.path.isdir(on_mnt):
                want, got = outcome(lambda: sorted(os.listdir(on_mnt))), \
                    outcome(lambda: sorted(v.listdir(p)))
            else:
                want, got = outcome(on_mnt.read_bytes), outcome(lambda: v.read(p))
            assert got == want, p
    # what the damage reaches, and what it leaves
    assert outcome((mnt / "a" / "docs.jsonl").read_bytes) == errno.EIO
    assert outcome(lambda: os.listdir(mnt / "a" / "docs")) == errno.EIO
    assert isinstance(outcome((mnt / "a" / "features.csv").read_bytes), bytes)
