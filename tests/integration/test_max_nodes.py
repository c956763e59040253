"""The inodes the kernel makes the daemon hold stay under --max-nodes (issue
39, point 2; docs/options.md): the kernel keeps a view's entries for a day,
so looking up every file of a large view held a node per file (about 400
bytes each, 3.6 GB for ten million files). Past the cap the daemon asks the
kernel to drop the entries looked up longest ago; their FORGETs free the
nodes, and a later lookup makes them again, with the same bytes."""
import os
import sys

from conftest import WRITERS, read_through
from test_cache_budget import proc_status

sys.path.insert(0, str(WRITERS))
import tatami_writer as tatw  # noqa: E402

MiB = 1 << 20
ROWS = 200_000
CAP = 2000
WARM = 50_000


def blob(i):
    return b"%x" % i


def test_lookups_of_a_large_view_stay_under_the_cap(mount, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    cols = [dict(name="doc", type="blobref", flags=1 | 4, values=[blob(i) for i in range(ROWS)])]
    tatw.write_file(src / "big.tatami", cols, [ROWS], 1 << 16,
                    blob_cfg={"doc": {"run_values": 4096}})
    mnt = mount(src, "--cache-size", "16M", "--max-nodes", str(CAP))
    pid = mount.last.proc.pid
    d = mnt / "big" / "blobs" / "doc"
    # past the cap many times over first: the allocator's own caches
    # (ASan's quarantine, per-thread caches) reach their size
    for i in range(WARM):
        os.stat(d / str(i))
    base = proc_status(pid, "RssAnon")
    # each a LOOKUP whose entry the kernel would keep for a day
    for i in range(WARM, ROWS):
        assert os.stat(d / str(i)).st_size == len(blob(i))
    grown = proc_status(pid, "RssAnon") - base
    # a node per file held: some 440 bytes each (release build), 63 MiB
    # here, 100 MiB under ASan
    assert grown < 32 * MiB, grown
    # the entries dropped are looked up again
    for i in range(0, ROWS, 997):
        assert read_through(d / str(i)) == blob(i), i
    assert mount.last.errors() == ""
