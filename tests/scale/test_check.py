"""Tests of the scale check's own measures (tests/scale/check.py): what one
reads is the memory of what it measures, whatever the checking process
holds. Run on the build SHARDFS_BUILD names (scripts/test.sh: the release
build, before the check)."""
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check  # noqa: E402

BUILD = Path(os.environ.get("SHARDFS_BUILD", HERE.parents[1] / "build")).resolve()


def test_module_fold_reads_the_childs_peak_not_its_parents(tmp_path):
    """A check that holds more than the fold's child ever does (as check.py
    does once it has made its 1,000,000-member tar: 429 MB) leaves the
    child's figure alone: read as ru_maxrss, the child's peak was the
    parent's, since a child started by vfork inherits it at exec (issue 39:
    260 bytes a sample where the fold's own was 36)."""
    n = 2000
    held = bytearray(b"\1") * (256 << 20)  # written: resident in this process
    results = tmp_path / "results.json"
    check.module_fold(check.Checks(results), BUILD, tmp_path, n)
    del held
    got = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["name"] for r in got] == ["scale module_fold_peak_over_budget"], got
    # 2,000 samples of a few dozen bytes hold a few MiB: far below the
    # 160 MiB budget, where the parent's 256 MiB would put it above
    assert got[0]["figure"] < 0, got
