#!/usr/bin/python3
"""Writes Shardlake storage roots (spec shardlake.md) for the tests.

    shardlake_writer.py OUTDIR            a root with several index versions,
                                          metrics, dims, PQ and empty shards,
                                          aliases, and broken inputs; plus
                                          OUTDIR/truth.json saying what is where
    shardlake_writer.py --sample OUTDIR   one small, intact root for demos

Everything here follows the spec's byte layout with numpy; nothing comes from
the format module under test.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np

SIDX_MAGIC = b"SLKIDX\0\0"


def fnv1a(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def shard_bytes(shard_id, centroids, ids, vectors=None, codes=None, pq_k=0, trailing=b""):
    """A .sidx shard: v1 with float32 vectors, v2 with uint8 PQ codes."""
    centroids = np.asarray(centroids, dtype="<f4").reshape(-1, centroids.shape[-1])
    dims = centroids.shape[1]
    ids = np.asarray(ids, dtype="<u8")
    if codes is None:
        head = SIDX_MAGIC + struct.pack("<IIIIQ", 1, shard_id, dims, len(centroids), len(ids))
        rec = np.zeros(len(ids), dtype=[("id", "<u8"), ("v", "<f4", (dims,))])
        rec["v"] = vectors
    else:
        m = codes.shape[1]
        head = SIDX_MAGIC + struct.pack("<IIIIQII", 2, shard_id, dims, len(centroids), len(ids), m, pq_k)
        rec = np.zeros(len(ids), dtype=[("id", "<u8"), ("c", "u1", (m,))])
        rec["c"] = codes
    rec["id"] = ids
    return head + centroids.tobytes() + rec.tobytes() + trailing


def pretty(obj) -> str:
    """serde_json's pretty style: 2-space indent, no trailing newline."""
    return json.dumps(obj, indent=2)


def f32list(a):
    return [float(x) for x in np.asarray(a, dtype="<f4")]


class Index:
    """One index version: shards written from vectors split by nearest centre."""

    def __init__(self, root: Path, version, dims, metric, nvec, nshards, seed,
                 pq=None, empty_shard=False, manifest_version=4, fingerprint_key="sha256",
                 dataset="ds-gen"):
        self.root, self.version, self.dims = root, version, dims
        rnd = np.random.default_rng(seed)
        centres = rnd.normal(0, 5, (nshards, dims)).astype("<f4")
        vecs = (centres[rnd.integers(0, nshards, nvec)] + rnd.normal(0, 1, (nvec, dims))).astype("<f4")
        ids = rnd.choice(2**40, nvec, replace=False).astype("<u8")
        near = np.argmin(((vecs[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
        d = root / "indexes" / version
        (d / "shards").mkdir(parents=True, exist_ok=True)
        self.truth = {"dims": dims, "metric": metric, "shards": []}
        book = None
        if pq:
            m, k = pq
            sub = dims // m
            book = rnd.normal(0, 3, (m, k, sub)).astype("<f4")
            (d / "pq_codebook.bin").write_bytes(
                b"SLKPQCB\0" + struct.pack("<IIIII", 1, dims, m, k, sub) + book.tobytes())
        entries = []
        for s in range(nshards + (1 if empty_shard else 0)):
            sel = near == s
            sid, svec = ids[sel], vecs[sel]
            centroid = svec.mean(0).astype("<f4") if len(svec) else centres[0]
            key = f"indexes/{version}/shards/shard-{s:04d}.sidx"
            t = {"key": key, "ids": [int(x) for x in sid], "centroids": [f32list(centroid)],
                 "format_version": 2 if pq else 1}
            if pq:
                m, k = pq
                codes = rnd.integers(0, k, (len(sid), m)).astype("u1")
                raw = shard_bytes(s, centroid[None], sid, codes=codes, pq_k=k)
                t["codes"] = codes.tolist()
                t["reconstructed"] = np.concatenate(
                    [book[j][codes[:, j]] for j in range(m)], axis=1).reshape(len(sid), dims).tolist() \
                    if len(sid) else []
            else:
                raw = shard_bytes(s, centroid[None], sid, vectors=svec)
                t["vectors"] = svec.tolist()
            (root / key).write_bytes(raw)
            entry = {"shard_id": s, "artifact_key": key, "vector_count": len(sid),
                     fingerprint_key: fnv1a(raw)}
            if manifest_version >= 2:
                entry["centroid"] = f32list(centroid)
            if manifest_version >= 4:
                entry["routing"] = {"centroid_id": f"shard-{s:04d}", "index_type": "flat",
                                    "file_location": key}
            entries.append(entry)
            self.truth["shards"].append(t)
        manifest = {
            "manifest_version": manifest_version, "dataset_version": dataset,
            "embedding_version": f"emb-{dataset}", "index_version": version, "alias": "latest",
            "dims": dims, "distance_metric": metric,
            "vectors_key": f"datasets/{dataset}/vectors.jsonl",
            "metadata_key": f"datasets/{dataset}/metadata.json",
            "shards": entries, "total_vector_count": int(nvec),
            "build_metadata": {"built_at": "2026-01-02T03:04:05Z", "builder_version": "0.1.0",
                               "num_kmeans_iters": 20, "nprobe_default": 2,
                               "build_duration_secs": 0.5},
        }
        if manifest_version >= 3:
            manifest["algorithm"] = {"algorithm": "ivf-flat", "params": {
                "kmeans_iters": 20, "kmeans_seed": 3735928559, "num_clusters": len(entries),
                "num_shards": len(entries)}}
            manifest["compression"] = {"enabled": bool(pq), "codec": "pq8" if pq else "none"}
            if pq:
                manifest["compression"].update(pq_num_subspaces=pq[0], pq_codebook_size=pq[1],
                                               codebook_key=f"indexes/{version}/pq_codebook.bin")
        (d / "manifest.json").write_text(pretty(manifest))


def write_alias(root: Path, alias, version):
    (root / "aliases").mkdir(parents=True, exist_ok=True)
    (root / "aliases" / f"{alias}.json").write_text(pretty({"alias": alias, "index_version": version}))


def write_dataset(root: Path, name="ds-gen", dims=8):
    d = root / "datasets" / name
    d.mkdir(parents=True, exist_ok=True)
    d.joinpath("vectors.jsonl").write_text(
        "".join(json.dumps({"id": i, "data": [0.5] * dims, "metadata": None},
                           separators=(",", ":")) + "\n" for i in range(3)))
    d.joinpath("metadata.json").write_text("{}")


def write_sample(out: Path):
    """A small intact root: one raw index, one PQ index, two aliases."""
    write_dataset(out)
    Index(out, "idx-sample", 4, "cosine", 40, 2, seed=7)
    Index(out, "idx-sample-pq", 8, "euclidean", 30, 2, seed=8, pq=(4, 16))
    write_alias(out, "latest", "idx-sample")
    write_alias(out, "pq", "idx-sample-pq")


def write_root(out: Path):
    """The test root; returns its truth: what each view must show."""
    write_dataset(out)
    indexes = {
        "idx-cos-8": Index(out, "idx-cos-8", 8, "cosine", 120, 3, seed=1),
        "idx-ip-5": Index(out, "idx-ip-5", 5, "inner_product", 60, 2, seed=2, empty_shard=True),
        "idx-euc-1": Index(out, "idx-euc-1", 1, "euclidean", 25, 2, seed=3, manifest_version=1,
                           fingerprint_key="fingerprint"),
        "idx-pq": Index(out, "idx-pq", 12, "euclidean", 80, 2, seed=4, pq=(4, 32)),
        "idx-pq-odd": Index(out, "idx-pq-odd", 9, "euclidean", 20, 1, seed=5, pq=(3, 7)),
    }
    aliases = {"latest": "idx-cos-8", "prod": "idx-pq", "odd": "idx-ip-5", "gone": "idx-missing"}
    for a, v in aliases.items():
        write_alias(out, a, v)

    # Broken input: each must be reported while everything else keeps working.
    bad = out / "indexes" / "idx-bad"
    (bad / "shards").mkdir(parents=True)
    good = shard_bytes(0, np.ones((1, 4), "<f4"), np.arange(5), vectors=np.zeros((5, 4), "<f4"))
    (bad / "shards" / "shard-0000.sidx").write_bytes(good)
    (bad / "shards" / "shard-0001.sidx").write_bytes(good[:-7])  # truncated
    (bad / "shards" / "shard-0002.sidx").write_bytes(  # counts overflow the file
        SIDX_MAGIC + struct.pack("<IIIIQ", 1, 2, 0xFFFFFFFF, 1, 2**62))
    (bad / "shards" / "shard-0003.sidx").write_bytes(b"NOTASHARD" * 8)  # bad magic
    (bad / "manifest.json").write_text('{"manifest_version": 4, "shards": [')  # does not parse
    (out / "aliases" / "broken.json").write_text('{"alias": "broken", "index_')
    (out / "aliases" / "escape.json").write_text(pretty({"alias": "escape", "index_version": "../../etc"}))

    return {
        "indexes": {k: v.truth for k, v in indexes.items()},
        "aliases": aliases,
        "bad": {
            "intact": ["indexes/idx-bad/shards/shard-0000.sidx"],
            "fail_open": ["indexes/idx-bad/shards/shard-0001.sidx",
                          "indexes/idx-bad/shards/shard-0002.sidx",
                          "indexes/idx-bad/shards/shard-0003.sidx",
                          "aliases/broken.json", "aliases/escape.json"],
            "bad_manifest": "indexes/idx-bad/manifest.json",
        },
    }


def main(argv):
    if len(argv) == 3 and argv[1] == "--sample":
        write_sample(Path(argv[2]))
    elif len(argv) == 2 and not argv[1].startswith("-"):
        out = Path(argv[1])
        truth = write_root(out)
        (out / "truth.json").write_text(json.dumps(truth))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
