"""The tests of the Python module (`import shardfs`, docs/python.md): the
module comes from the build (SHARDFS_BUILD/python), and the mounted tests'
fixtures (tests/integration/conftest.py) give real mounts to compare with.

Under an ASan build the extension needs the ASan runtime loaded first:
scripts/test.sh runs this suite with LD_PRELOAD set to it (and leak checks
off: the interpreter's own allocations would count as leaks)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "shardfs_mounting", Path(__file__).resolve().parents[1] / "integration" / "conftest.py")
mounting = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mounting)
mount = mounting.mount  # the fixture: mounts for real, always unmounts

REPO, BUILD, WRITERS = mounting.REPO, mounting.BUILD, mounting.WRITERS
MODULE_DIR = BUILD / "python"
sys.path.insert(0, str(MODULE_DIR))

PYTHON = "/usr/bin/python3"
# what the writers' --sample writes for each format: (folder, container)
SAMPLES = {
    "tsumugi": "sample.tsumugi",
    "tatami": "sample.tatami",
    "taridx": "demo.taridx",
    "shardlake": "shard-0000.sidx",
    "tet": "weather.tet",
}


def module_env():
    """The environment a child Python needs to import the built module."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(MODULE_DIR), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="session")
def samples(tmp_path_factory):
    """One directory per format, each holding what its writer's --sample
    writes (the files docs/tree-layout.md shows)."""
    top = tmp_path_factory.mktemp("samples")
    for fmt in SAMPLES:
        (top / fmt).mkdir()
        subprocess.run([PYTHON, str(WRITERS / f"{fmt}_writer.py"), "--sample", str(top / fmt)],
                       check=True, capture_output=True, timeout=120)
    return top
