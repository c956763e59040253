"""Smoke test of the benchmark suite: `run.py --quick` completes and prints
one line per comparison plus a JSON summary of the documented shape. It
checks the structure only; timings on small data mean nothing."""
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES = {"small_first_pass", "small_second_pass", "parallel_4_readers", "large_first_read",
         "large_second_read", "large_first_read_requests", "large_second_read_requests",
         "large_first_read_cpu", "large_page_cache_folios", "sparse_hole_read", "zstd_decode_128k_reads", "zstd_decode_cpu", "zstd_decoded_once", "mount_usable", "mount_first_view",
         "rss_before_use", "rss_after_stream", "fold_first_lookup", "fold_find_all",
         "fold_find_peak_rss", "fold_rss_after_forget", "fold10m_first_lookup",
         "fold10m_find_all", "fold10m_find_peak_rss", "containers_ls_300",
         "containers_ls_300_rss", "containers_ls_3000", "containers_ls_3000_rss",
         "containers_find_peak_rss",
         "daemon_cpu_idle", "daemon_cpu_trickle", "uring_small_first_pass",
         "dev_small_first_pass", "uring_small_second_pass", "dev_small_second_pass",
         "uring_parallel_4_readers", "dev_parallel_4_readers", "uring_large_first_read",
         "uring_daemon_cpu_idle", "dev_daemon_cpu_idle", "python_random_reads",
         "python_random_reads_first_pass",
         "pread_random_reads", "python_fold_open", "python_dataloader_jpeg",
         "mount_dataloader_jpeg", "loader_dataloader_jpeg", "python_dataloader_jpeg_cpu",
         "mount_dataloader_jpeg_cpu", "loader_dataloader_jpeg_cpu",
         "mount_dataloader_jpeg_daemon_cpu", "loader_dataloader_jpeg_daemon_cpu",
         "tet_xr_open_files", "tet_xr_open_time"} | {
             f"{m}_{r}_{p}_pass{x}" for r in ("os", "open") for p in ("first", "second")
             for m in ("default", "open", "loader", "uring", "loader_uring", "loader_push")
             for x in ("", "_cpu", "_requests")
             if m != "default" or not x} | {
             f"{m}_open_2_readers"
             for m in ("default", "open", "loader", "uring", "loader_uring", "loader_push")} | {
             f"ztar_{f}_{c}" for f in ("gzip", "pigz", "zstd", "xz", "pbzip2", "lz4")
             for c in ("first_member", "kept_first_member", "random_read", "random_read_cold",
                       "large_read", "copy")}
KEYS = {"case", "figure", "unit", "reference", "reference_figure", "ratio", "target",
        "target_op", "met"}


def test_quick_run(tmp_path):
    build = os.environ.get("SHARDFS_BUILD", str(REPO / "build-bench"))
    out = tmp_path / "summary.json"
    r = subprocess.run([sys.executable, str(HERE / "run.py"), "--quick", "--build", build,
                        "--workdir", str(tmp_path / "data"), "--json", str(out)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-4000:]
    summary = json.loads(out.read_text())
    assert summary["quick"] is True and summary["runs"] == 2
    results = summary["results"]
    assert {x["case"] for x in results} == CASES
    lines = r.stdout.splitlines()
    # the machine's wake-up costs come first
    wake = summary["machine"]["pipe_round_trip"]
    assert set(wake) == {"cross_cpu_us", "cross_cpu_polling_us", "one_cpu_us"}
    assert all(v > 0 for v in wake.values())
    assert lines.pop(0).startswith("machine: pipe round trip")
    for i, x in enumerate(results):
        assert set(x) == KEYS
        # an idle daemon may use no CPU at all, the default mount's second
        # pass sends it no request, and a FUSE file may have no large folio
        assert x["figure"] > 0 or x["case"].endswith(("daemon_cpu_idle", "_cpu", "_requests",
                                                      "_folios")), x
        assert x["reference_figure"] > 0, x
        # tet_xr_open_files states its ratio: the opens themselves, limit 1
        want_ratio = x["figure"] if x["case"] == "tet_xr_open_files" else \
            x["figure"] / x["reference_figure"]
        assert abs(x["ratio"] - want_ratio) < 1e-9 * x["ratio"] + 1e-12, x
        if x["target"] is None:
            assert x["met"] is None and x["target_op"] is None
        else:
            want = x["ratio"] >= x["target"] if x["target_op"] == ">=" else \
                x["ratio"] <= x["target"]
            assert x["met"] == want, x
        # the line for each comparison comes first, in the same order
        assert lines[i].split()[0] == x["case"]
        assert x["reference"] in lines[i]
    # the rest of stdout is the same summary
    assert json.loads("\n".join(lines[len(results):])) == summary
    # every read through the mount was decoded exactly once
    assert next(x for x in results if x["case"] == "zstd_decoded_once")["figure"] == 1.0
