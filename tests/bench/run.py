#!/usr/bin/python3
"""shardfs benchmark suite (issue 8).

    /usr/bin/python3 tests/bench/run.py [--quick] [--runs N] [--only CASE,...]
                                        [--build DIR] [--workdir DIR] [--json FILE]

Generates its own data (tar folds indexed with shardfs-taridx, .tet files
from the tet writer) in --workdir, measures every case against a reference
measured in the same run, and prints one line per comparison: the figure,
the reference, their ratio and the target; then a JSON summary (also
written to --json). Figures are medians of --runs runs. The machine is
shared and noisy: the ratios are the result, not the absolute times.

References: the same bytes read natively (extracted files, or the byte
range of the source file, in the page cache), squashfuse_ll over an
uncompressed squashfs image of the same files, archivemount on one shard,
`zstd -d` on the same frames, and each compressed tar's own decompressor
(gzip, pigz, zstd, xz, bzip2, pbzip2, lz4). The packages they come from (and PIL,
which makes and decodes the JPEGs of the python group) are installed with
apt-get when missing (as root).

--quick runs every case on small data with two runs, for the smoke test;
its figures are not meaningful.
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cases  # noqa: E402
from data import REPO  # noqa: E402

PACKAGES = {"squashfuse_ll": "squashfuse", "mksquashfs": "squashfs-tools",
            "archivemount": "archivemount", "zstd": "zstd", "fusermount3": "fuse3",
            # the ztar group's compressors (gzip is always there)
            "pigz": "pigz", "xz": "xz-utils", "bzip2": "bzip2", "pbzip2": "pbzip2", "lz4": "lz4"}
# Python modules the cases import (PIL: the JPEGs of the DataLoader case)
PY_PACKAGES = {"PIL": "python3-pil"}


def install_references():
    missing = sorted({pkg for tool, pkg in PACKAGES.items() if not shutil.which(tool)} |
                     {pkg for mod, pkg in PY_PACKAGES.items() if not importlib.util.find_spec(mod)})
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"bench: missing {' '.join(missing)}; run as root or: "
                 f"sudo apt-get install {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get", "install", "-y", "-qq", *missing]
    if subprocess.run(apt, env=env, capture_output=True).returncode:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        subprocess.run(apt, env=env, check=True, capture_output=True)


# the Python module's build outputs (the `python` group imports it)
PY_EXTENSION = "_shardfs" + sysconfig.get_config_var("EXT_SUFFIX")
PY_FILES = ("__init__.py", "_fold.py", "_torch.py", "_tree.py")


def build(build_dir):
    """Builds (or refreshes) the daemon and tools; an optimised build by
    default, so the figures are what users get."""
    if not (build_dir / "build.ninja").exists():
        subprocess.run(["meson", "setup", str(build_dir), f"-Dpython={sys.executable}"], cwd=REPO, check=True,
                       capture_output=True)
    subprocess.run(["ninja", "-C", str(build_dir), "fs/shardfs", "tools/shardfs-taridx",
                    "python/shardfs/" + PY_EXTENSION, *(f"python/shardfs/{f}" for f in PY_FILES)],
                   check=True, capture_output=True)


def wakeup_costs(work):
    """The machine's pipe round trip in microseconds (tests/bench/wakeup.c):
    across CPUs sleeping, across CPUs with the answering side polling, and
    on one CPU. Every FUSE round trip pays at least one wake-up, so these
    say what the small-file figures can be on this machine."""
    exe = work / "wakeup"
    src = Path(__file__).resolve().parent / "wakeup.c"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    def run(*args):
        out = subprocess.run([*args], check=True, capture_output=True, text=True).stdout
        return float(out)
    return {"cross_cpu_us": run(str(exe)), "cross_cpu_polling_us": run(str(exe), "--poll"),
            "one_cpu_us": run("taskset", "-c", "0", str(exe))}


def fmt(v):
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"


def line(r):
    target = f"{r['target_op']} {r['target']:g}" if r["target"] is not None else ""
    verdict = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
    return (f"{r['case']:<22} {fmt(r['figure']):>9} {r['unit']:<8} "
            f"{r['reference']:<26} {fmt(r['reference_figure']):>9}  "
            f"ratio {fmt(r['ratio']):>6}  {target:<8} {verdict}").rstrip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small data, two runs (smoke test)")
    ap.add_argument("--runs", type=int, help="runs per figure (default 5, quick 2)")
    ap.add_argument("--only", help="comma-separated case groups: " + ",".join(cases.GROUPS))
    ap.add_argument("--build", type=Path, default=Path(os.environ.get(
        "SHARDFS_BENCH_BUILD", REPO / "build-bench")), help="meson build dir (default build-bench)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/shardfs-bench"),
                    help="where generated data is kept between runs")
    ap.add_argument("--json", type=Path, help="also write the JSON summary here")
    a = ap.parse_args()
    groups = a.only.split(",") if a.only else list(cases.GROUPS)
    unknown = [g for g in groups if g not in cases.GROUPS]
    if unknown:
        ap.error(f"unknown case group {unknown[0]} (have {', '.join(cases.GROUPS)})")

    install_references()
    build(a.build.resolve())
    ctx = cases.Context(build=a.build.resolve(), work=a.workdir.resolve(), quick=a.quick,
                        runs=a.runs or (2 if a.quick else 5))
    ctx.work.mkdir(parents=True, exist_ok=True)
    wake = wakeup_costs(ctx.work)
    print("machine: pipe round trip {cross_cpu_us:.1f} us across CPUs, {cross_cpu_polling_us:.1f} "
          "us with the answer polled, {one_cpu_us:.1f} us on one CPU".format(**wake), flush=True)
    t0 = time.monotonic()
    results = []
    for g in groups:
        for r in cases.GROUPS[g](ctx):
            print(line(r), flush=True)
            results.append(r)
    summary = {"quick": a.quick, "runs": ctx.runs, "seconds": round(time.monotonic() - t0, 1),
               "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release,
                           "pipe_round_trip": wake},
               "results": results}
    text = json.dumps(summary, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
