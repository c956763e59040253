"""The programs in examples/ run as users run them, against a mount of data
written here, and their output is checked against the values written."""
import hashlib
import importlib.util
import io
import json
import subprocess
import tarfile

import numpy as np

from conftest import REPO, TOOLS, WRITERS

EXAMPLES = REPO / "examples"
PYTHON = "/usr/bin/python3"


def writer(name):
    spec = importlib.util.spec_from_file_location(name, WRITERS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_example(*args, timeout=300, stderr=None):
    """The program's output; its stderr goes into the list `stderr` if given."""
    r = subprocess.run([PYTHON, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    if stderr is not None:
        stderr.append(r.stderr)
    return r.stdout


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def add_member(tf, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    tf.addfile(info, io.BytesIO(data))


def test_pytorch_dataloader_reads_every_sample_by_key(tmp_path, mount):
    """Tars written with Python's tarfile, indexed by shardfs-taridx,
    mounted; a 4-worker DataLoader reads each sample by its key path."""
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(5)
    keys = [f"img{i:05d}" for i in range(150)]
    expected = {}
    for shard in range(3):
        with tarfile.open(src / f"train_{shard:04d}.tar", "w",
                          format=tarfile.USTAR_FORMAT) as tf:
            for key in keys[shard::3]:
                arr = rng.standard_normal((int(rng.integers(1, 6)), 16)).astype("<f4")
                buf = io.BytesIO()
                np.save(buf, arr)
                label = int(rng.integers(0, 1000))
                add_member(tf, key + ".npy", buf.getvalue())
                add_member(tf, key + ".cls", str(label).encode())
                expected[key] = (str(label), str(arr.shape), sha256(arr.tobytes()))
    subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src), "train"],
                   check=True, timeout=60)
    mnt = mount(src)
    keyfile = tmp_path / "keys.txt"
    keyfile.write_text("".join(k + "\n" for k in reversed(keys)))
    out = run_example(EXAMPLES / "pytorch_taridx" / "loader.py", mnt / "train",
                      "--keys", keyfile, "--workers", "4", "--batch-size", "8")
    got = {}
    for line in out.splitlines():
        key, label, shape, digest = line.split("\t")
        assert key not in got, f"{key} delivered twice"
        got[key] = (label, shape, digest)
    assert got == expected


def test_pytorch_map_dataset_over_samples_jsonl(tmp_path, mount):
    """Samples of varying members (nested directories, a sample without a
    label, upper-case extensions) written with tarfile and indexed by
    shardfs-taridx; the map-style Dataset reads them in random order by
    index through .shardfs/samples.jsonl with 4 workers."""
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(7)
    expected = {}
    n = 0
    for shard in range(3):
        with tarfile.open(src / f"train_{shard:04d}.tar", "w", format=tarfile.GNU_FORMAT) as tf:
            for k in range(60):
                key = f"{'sub/' if k % 5 == 0 else ''}s{shard}_{k:03d}"
                arr = rng.standard_normal((int(rng.integers(1, 5)), 8)).astype("<f4")
                buf = io.BytesIO()
                np.save(buf, arr)
                members = {"npy": (buf.getvalue(), arr.tobytes())}
                if k % 7:
                    label = str(int(rng.integers(0, 100))).encode()
                    members["cls"] = (label, label)
                if k % 11 == 0:
                    members["TXT"] = (b"caption %d" % k, b"caption %d" % k)
                for ext, (data, _) in members.items():
                    add_member(tf, f"{key}.{ext}", data)
                digests = " ".join(f"{e}={sha256(members[e][1])}" for e in sorted(members))
                expected[n] = (key, digests)
                n += 1
    subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src), "train"],
                   check=True, timeout=60)
    mnt = mount(src)
    err = []
    out = run_example(EXAMPLES / "pytorch_taridx" / "map_dataset.py", mnt / "train",
                      "--workers", "4", "--shuffle", stderr=err)
    got = {}
    order = []
    for line in out.splitlines():
        i, key, digests = line.split("\t")
        assert int(i) not in got, f"sample {i} delivered twice"
        got[int(i)] = (key, digests)
        order.append(int(i))
    assert got == expected
    assert order != sorted(order)  # random access, not a scan
    tput = [x for x in err[0].splitlines() if x.startswith("throughput: ")]
    assert tput and f"throughput: {n} samples" in tput[0], err[0]
    print(tput[0])


def test_xarray_zarr_and_numpy_read_tet_datasets(tmp_path, mount):
    tw = writer("tet_writer")
    src = tmp_path / "src"
    src.mkdir()
    w = (np.arange(5 * 7, dtype="<f4").reshape(5, 7) * 0.25 - 3).astype("<f4")
    counts = (np.arange(10, dtype="<i4") ** 2 - 40).astype("<i4")
    units = [f"unit{i}" for i in range(5)]
    tw.write_tet(str(src / "weights.tet"), [
        tw.Dataset(b"layer/w", w, (2, 3), "zstd"),
        tw.Dataset(b"counts", counts, (4,), "raw"),
    ], footer={"history": [], "metadata": {"datasets": {"layer/w": {
        "attrs": {"units": "1"}, "dim_names": ["out", "in"],
        "coords": {"out": {"labels": units}}}}}})
    mnt = mount(src)
    out = run_example(EXAMPLES / "zarr_tet" / "read_tet.py", mnt / "weights")
    got = {d["dataset"]: d for d in map(json.loads, out.splitlines())}
    # "layer/w" is the array w of the group layer (docs/formats/tet.md)
    assert set(got) == {"layer/w", "counts"}
    for name, arr in (("layer/w", w), ("counts", counts)):
        d = got[name]
        assert d["shape"] == list(arr.shape)
        assert d["dtype"] == arr.dtype.str
        assert d["sha256"] == sha256(arr.tobytes())
        assert d["npy_equal"] is True
    assert got["layer/w"]["dims"] == ["out", "in"]
    assert got["layer/w"]["coords"] == {"out": units}
    assert got["layer/w"]["attrs"] == {"units": "1"}
    assert got["counts"]["dims"] == ["phony_dim_0"] and got["counts"]["coords"] == {}


def test_numpy_reads_tatami_columns(tmp_path, mount):
    tm = writer("tatami_writer")
    src = tmp_path / "src"
    src.mkdir()
    ids = list(range(100, 111))
    price = [9.5, None, 12.25, 3.0, None, 0.5, 7.75, 1.0, 2.0, -4.5, 1e10]
    title = ["apple", "pear", None, "fig", "kiwi", "", "plum", None, "lime", "date", "caf\u00e9"]
    cols = [dict(name="id", type="int64", flags=2, values=ids),
            dict(name="price", type="float64", flags=1, values=price),
            dict(name="title", type="string", flags=1, values=title)]
    tm.write_file(src / "part.tatami", cols, [4, 4, 3], 3)
    mnt = mount(src)
    out = run_example(EXAMPLES / "numpy_tatami" / "read_columns.py", mnt / "part")
    got = {d["column"]: d["values"] for d in map(json.loads, out.splitlines())}
    assert got == {"id": ids, "price": price, "title": title}


def test_numpy_nearest_neighbours_over_shardlake_shards(tmp_path, mount):
    sw = writer("shardlake_writer")
    root = tmp_path / "lake"
    root.mkdir()
    sw.write_dataset(root)
    index = sw.Index(root, "idx-a", 6, "euclidean", 80, 3, seed=11)
    sw.write_alias(root, "latest", "idx-a")
    ids = np.array([i for s in index.truth["shards"] for i in s["ids"]], dtype=np.uint64)
    vecs = np.array([v for s in index.truth["shards"] for v in s["vectors"]], dtype=np.float32)
    assert len(ids) == 80
    mnt = mount(root)
    query = [0.5, -1.0, 2.0, 0.0, 1.5, -0.25]
    out = run_example(EXAMPLES / "numpy_shardlake" / "nearest.py", mnt / "aliases" / "latest",
                      "5", *query)
    got = [(int(a), float(b)) for a, b in (line.split("\t") for line in out.splitlines())]
    d = ((vecs - np.array(query, dtype=np.float32)) ** 2).sum(axis=1)
    order = np.argsort(d, kind="stable")[:5]
    assert [g[0] for g in got] == [int(ids[i]) for i in order]
    for (_, dist), i in zip(got, order):
        assert abs(dist - float(d[i])) <= 1e-4 * max(1.0, float(d[i]))
