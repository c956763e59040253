"""A fold through the module: fold[i] and by key against the mount's
samples.jsonl and member files; the DataLoader example on the module
(workers by fork and by spawn) printing what the mounted example prints;
and the same run with /dev/fuse hidden in a private mount namespace."""
import json
import os
import subprocess
import tarfile

import numpy as np
import pytest

from conftest import BUILD, PYTHON, REPO, module_env

import shardfs

EXAMPLE = REPO / "examples" / "pytorch_taridx"


@pytest.fixture
def fold(tmp_path):
    """Three GNU tars of samples with varying members (a nested key, a
    sample without a label, an upper-case extension), indexed by
    shardfs-taridx: the directory holding train.taridx."""
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(11)
    for shard in range(3):
        with tarfile.open(src / f"train_{shard:04d}.tar", "w", format=tarfile.GNU_FORMAT) as tf:
            for k in range(40):
                key = f"{'deep/' if k % 6 == 0 else ''}k{shard}_{k:03d}"
                members = {"bin": rng.bytes(int(rng.integers(0, 3000)))}
                if k % 4:
                    members["cls"] = str(k % 10).encode()
                if k % 9 == 0:
                    members["JSON"] = json.dumps({"k": k}).encode()
                arr = rng.standard_normal((2, int(rng.integers(1, 4)))).astype("<f4")
                with open(tmp_path / "a.npy", "wb") as f:
                    np.save(f, arr)
                members["npy"] = (tmp_path / "a.npy").read_bytes()
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    info.mtime = 1700000000
                    tf.addfile(info, __import__("io").BytesIO(data))
    subprocess.run([str(BUILD / "tools" / "shardfs-taridx"), "--quiet", str(src), "train"],
                   check=True, timeout=60)
    return src


def test_fold_samples_by_index_and_key_as_the_mount_shows_them(fold, mount):
    mnt = mount(fold)
    lines = [json.loads(x) for x in (mnt / "train/.shardfs/samples.jsonl").read_text().splitlines()]
    with shardfs.open(fold / "train.taridx") as v:
        f = v.fold()
        assert len(f) == len(lines) == 120
        for i, line in enumerate(lines):
            s = f[i]
            assert (s.index, s.key) == (line["i"], line["key"])
            want = {ext: (mnt / "train" / m).read_bytes() for ext, m in line["members"].items()}
            assert dict(s) == want, i
            assert f.by_key(line["key"]) == s and f.index(line["key"]) == i
        assert f[-1].key == lines[-1]["key"]
        with pytest.raises(IndexError):
            f[len(lines)]
        with pytest.raises(KeyError):
            f.by_key("no such key")
        zero = v.fold(buffers=True)[5]
        assert all(isinstance(b, memoryview) for b in zero.values())
        assert {e: bytes(b) for e, b in zero.items()} == dict(f[5])


def test_fold_needs_no_numpy(fold, mount):
    """A fold opens and reads in a process where numpy cannot be imported
    (its line index is read in place), and travels by pickle."""
    mnt = mount(fold)
    want = json.loads((mnt / "train/.shardfs/samples.jsonl").read_text().splitlines()[7])
    code = f"""
import json, pickle, sys
sys.modules["numpy"] = None
import shardfs
with shardfs.open({str(fold / "train.taridx")!r}) as v:
    f = v.fold()
    g = pickle.loads(pickle.dumps(f))
    s = g[7]
    print(json.dumps([len(f), s.index, s.key, sorted(s), "numpy" in sys.modules and sys.modules["numpy"] is not None]))
"""
    got = json.loads(run([str(PYTHON), "-c", code]))
    assert got == [120, want["i"], want["key"], sorted(want["members"]), False]


def run(cmd, timeout=600):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=module_env())
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_dataloader_on_the_module_prints_what_the_mounted_example_prints(fold, mount, start):
    mnt = mount(fold)
    want = run([PYTHON, EXAMPLE / "map_dataset.py", mnt / "train", "--workers", "2",
                "--shuffle"])
    got = run([PYTHON, EXAMPLE / "module_dataset.py", fold / "train.taridx", "--workers",
               "2", "--shuffle", "--start", start])
    assert len(got.splitlines()) == 120
    assert got == want


def test_no_mount_needed_with_dev_fuse_hidden(fold, mount):
    """The module example in a private mount namespace whose /dev/fuse is
    /dev/null: no FUSE reachable, the same lines as through a mount."""
    mnt = mount(fold)
    want = run([PYTHON, EXAMPLE / "map_dataset.py", mnt / "train", "--workers", "2",
                "--shuffle"])
    null = os.stat("/dev/null").st_rdev
    script = (f'mount --bind /dev/null /dev/fuse && '
              f'{PYTHON} -c "import os; print(os.stat(\'/dev/fuse\').st_rdev)" && '
              f'exec {PYTHON} {EXAMPLE / "module_dataset.py"} {fold / "train.taridx"} '
              f'--workers 2 --shuffle')
    out = run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
    first, rest = out.split("\n", 1)
    assert int(first) == null  # /dev/fuse was hidden in there
    assert rest == want
    # and out here /dev/fuse is untouched
    assert os.stat("/dev/fuse").st_rdev != null

