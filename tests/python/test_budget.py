"""The module keeps the daemon's bounds (issue 39, point 4): a fold over a
plain tar stays within the process's cache budget plus the per-sample cost
docs/python.md states, measured as the process's resident memory; and a
View left idle gives back what its tar's index holds when another View
needs the room, as the daemon closes idle views (docs/architecture.md,
"Open views"), the index made again when it is used."""
import io
import os
import subprocess
import tarfile
import textwrap

from conftest import PYTHON, module_env

MiB = 1 << 20


def plain_tar(path, n, prefix="s"):
    """A plain tar of n one-line members <prefix><i>.bin, written by
    tarfile; returns {name: bytes}."""
    want = {}
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            name, data = f"{prefix}{i:07d}.bin", f"{prefix} member {i}\n".encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
            want[name] = data
    return want


def run_child(code, *args):
    """Runs `code` in a fresh interpreter importing the built module: its
    stdout's last line, split."""
    p = subprocess.run([PYTHON, "-c", textwrap.dedent(code), *map(str, args)],
                       env=module_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.split("\n")[-2].split()


# What each child starts with: the module, and its resident memory read
# from /proc/self/status.
CHILD = """
    import gc, sys, time, zlib
    import shardfs

    def kib(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
"""


# Peak resident memory of a child that folds over every sample: its
# baseline is taken after the module is imported and the budget set.
FOLD = CHILD + """
    path, budget = sys.argv[1], int(sys.argv[2])
    shardfs.set_cache_size(budget)
    base = kib("VmRSS")
    n = crc = 0
    with shardfs.open(path) as v:
        for s in v.fold():
            n += 1
            crc = zlib.crc32(s["bin"], crc)
        stats = shardfs.cache_stats()
    print(n, crc, kib("VmHWM") - base, stats["budget"], stats["bytes_charged"])
"""

# The documented bound (docs/python.md, "Memory"): the budget, about 40
# bytes a sample that are not charged, and a constant for the interpreter's
# and the library's own (a sanitizer build's shadow memory and quarantine
# included).
PER_SAMPLE = 48
CONSTANT = 24 * MiB


def test_a_fold_stays_within_its_budget_plus_the_per_sample_cost(tmp_path):
    n, budget = 100_000, 16 * MiB
    want = plain_tar(tmp_path / "t.tar", n)
    import zlib
    crc = 0
    for name in sorted(want):
        crc = zlib.crc32(want[name], crc)
    got_n, got_crc, peak_kib, got_budget, charged = map(int, run_child(
        FOLD, tmp_path / "t.tar", budget))
    assert (got_n, got_crc, got_budget) == (n, crc, budget)
    # what the fold keeps is charged (index rows, samples.jsonl, name tags)
    assert charged > 32 * n
    assert peak_kib * 1024 <= budget + PER_SAMPLE * n + CONSTANT, \
        f"peak {peak_kib / 1024:.1f} MiB above the baseline, budget {budget / MiB:.0f} MiB"


# Two tars, each alone within the budget, not both: the second's walk finds
# no room while the first View holds its index, idle.
IDLE = CHILD + """
    a_path, b_path, budget, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    shardfs.set_cache_size(budget)
    a, b = shardfs.open(a_path), shardfs.open(b_path)
    assert a.read("a0000007.bin") == b"a member 7\\n"
    held = shardfs.cache_stats()["bytes_charged"]
    time.sleep(1.5)  # a is idle now
    # b's walk needs the room a holds: a gives it back
    assert b.read("b0000009.bin") == b"b member 9\\n"
    assert b.read(f"b{n - 1:07d}.bin") == f"b member {n - 1}\\n".encode()
    sheds = shardfs.cache_stats()["sheds"]
    time.sleep(1.5)
    # a's index is made again when a is used (b, idle, giving back its own)
    assert a.read(f"a{n - 2:07d}.bin") == f"a member {n - 2}\\n".encode()
    names = a.listdir("")
    assert sorted(names) == [f"a{i:07d}.bin" for i in range(n)]
    # the names its lookups gave out come first, as before the shed
    assert names[:2] == ["a0000007.bin", f"a{n - 2:07d}.bin"]
    print(held, sheds, shardfs.cache_stats()["sheds"])
"""


def test_an_idle_view_gives_back_its_index_to_another(tmp_path):
    n = 30_000
    plain_tar(tmp_path / "a.tar", n, "a")
    plain_tar(tmp_path / "b.tar", n, "b")
    # each walk's peak (4 MiB: its tables double, up to 32,768 rows) fits
    # alone, not beside the other View's index and name tags (40 bytes a
    # member)
    budget = 5 * MiB
    held, sheds, sheds_after = map(int, run_child(IDLE, tmp_path / "a.tar", tmp_path / "b.tar",
                                                  budget, n))
    assert held >= 32 * n
    assert sheds >= 1 and sheds_after >= sheds


LISTDIR = CHILD + """
    shardfs.set_cache_size(int(sys.argv[2]))
    base = kib("VmRSS")
    with shardfs.open(sys.argv[1]) as v:
        for _ in range(2):
            n = len(v.listdir(""))
            gc.collect()
        print(n, kib("VmRSS") - base)
"""


def test_a_listing_of_many_keeps_no_node_per_entry(tmp_path):
    """View.listdir of a 100,000-member tar, twice: what stays is the
    index and the listing's table of on-demand entries (about 30 bytes
    each), not a node per entry (about 260 bytes each were kept until the
    View closed: 47 MiB here). An ASan build's shadow and allocator double
    what each allocation costs."""
    n = 100_000
    plain_tar(tmp_path / "t.tar", n)
    got_n, left_kib = map(int, run_child(LISTDIR, tmp_path / "t.tar", 16 * MiB))
    assert got_n == n
    scale = 2 if "libasan" in os.environ.get("LD_PRELOAD", "") else 1
    assert left_kib * 1024 <= scale * (200 * n + 8 * MiB), f"{left_kib / 1024:.1f} MiB left"


SPARSE = CHILD + """
    sys.path.insert(0, sys.argv[3])
    from sparse_tar import PIECES, add_sparse
    import tarfile
    path, budget, members = sys.argv[1], int(sys.argv[2]), int(sys.argv[4])
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
        want = [add_sparse(t, f"m{k}", k) for k in range(members)]
    shardfs.set_cache_size(budget)
    base = kib("VmRSS")
    end = 4 * PIECES - 4096
    with shardfs.open(path) as v:
        for _ in range(2):
            for k in range(members):
                for off in (0, end):
                    assert v.read(f"m{k}", 4096, off) == want[k][off:off + 4096], (k, off)
        print(shardfs.cache_stats()["bytes_charged"], kib("VmHWM") - base)
"""


def test_idle_sparse_maps_give_room_to_the_next(tmp_path):
    """Eight sparse members of 65,536 pieces in one tar (6 MiB of extents
    each) read in turn, twice, under a 16 MiB budget: the extents of the
    members read before are dropped for the next (before, the third
    member's read failed for room) and made again at the second pass."""
    writers = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "writers")
    charged, grew_kib = map(int, run_child(SPARSE, tmp_path / "s.tar", 16 * MiB, writers, 8))
    assert charged <= 16 * MiB
    scale = 2 if "libasan" in os.environ.get("LD_PRELOAD", "") else 1
    assert grew_kib * 1024 <= scale * (16 * MiB + 48 * MiB), f"{grew_kib / 1024:.1f} MiB"
