"""32 concurrent readers (16 threads here, 16 processes) doing random reads
over every format for a fixed time, with a decode cache far smaller than the
decoded data so it evicts constantly. Every byte is checked against
shardfs-cat (views) or SRC (pass-through); no errors, no mismatches, the
daemon's resident memory flat, and at teardown a clean exit with no
sanitizer (leak) report."""
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import FIXTURES
from relutil import cat, copy_samples, fingerprint, view_dirs

sys.path.insert(0, str(Path(__file__).parent))
import stress_reader  # noqa: E402

SECONDS = 25
THREADS = PROCESSES = 16


def rss_kib(pid):
    """The daemon's own resident memory, RssAnon: mapped source pages are
    the page cache's (flat here, about 12 MiB)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def test_stress(tmp_path, tmp_path_factory, mount, monkeypatch):
    src = tmp_path / "src"
    copy_samples(src, tmp_path_factory.getbasetemp())
    # more and larger compressed parts than the samples have
    for sub in ("tsumugi", "tet", "tatami"):
        if (FIXTURES / sub).is_dir():
            shutil.copytree(FIXTURES / sub, src / "fixtures" / sub,
                            ignore=shutil.ignore_patterns("*.json", "large.tet"))
    (src / "plain.bin").write_bytes(random.Random(1).randbytes(3 << 20))
    before = fingerprint(src)
    # a small quarantine, so ASan's own holding of freed memory cannot pass
    # for growth
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=1:quarantine_size_mb=8")
    # every part these files are made of fits in 256 KiB (a larger one
    # would be refused), all of them together do not: evictions all the time
    mnt = mount(src, "--cache-size", "256K", "--threads", "16")
    pid = mount.last.proc.pid

    # expectations: SRC bytes, and shardfs-cat for a sample of view files
    expect = tmp_path / "expect"
    expect.mkdir()
    plan = {}
    for dirpath, _, names in os.walk(src):
        for n in names:
            p = Path(dirpath) / n
            plan[str(mnt / p.relative_to(src))] = str(p)
    views = view_dirs(src, mnt)
    assert {c.suffix for c in views.values()} >= {".tsumugi", ".tet", ".sidx"}
    rnd = random.Random(2)
    for v, c in sorted(views.items()):
        files = sorted(Path(d) / n for d, _, ns in os.walk(v) for n in ns)
        for p in rnd.sample(files, min(12, len(files))):
            want, why = cat(c, str(p.relative_to(v)))
            assert why is None, (p, why)
            e = expect / f"{len(plan)}"
            e.write_bytes(want)
            plan[str(p)] = str(e)
    (tmp_path / "plan.json").write_text(json.dumps(plan))

    rss = []
    done = threading.Event()

    def sample_rss():
        while not done.is_set():
            rss.append(rss_kib(pid))
            done.wait(0.5)

    results = []

    def thread_reader(seed):
        results.append(stress_reader.run(plan, seed, SECONDS))

    sampler = threading.Thread(target=sample_rss)
    sampler.start()
    procs = [subprocess.Popen(["/usr/bin/python3", stress_reader.__file__,
                               str(tmp_path / "plan.json"), str(1000 + i), str(SECONDS)],
                              stdout=subprocess.PIPE, text=True) for i in range(PROCESSES)]
    threads = [threading.Thread(target=thread_reader, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 60)
        assert not t.is_alive(), "a reader thread hung"
    for p in procs:
        out, _ = p.communicate(timeout=SECONDS + 60)
        assert p.returncode == 0
        results.append(json.loads(out))
    done.set()
    sampler.join()

    assert len(results) == THREADS + PROCESSES
    problems = [x for r in results for x in r["problems"]]
    assert not problems, problems[:20]
    reads = sum(r["reads"] for r in results)
    assert all(r["reads"] > 0 for r in results)
    stats = json.loads((mnt / ".shardfs" / "stats.json").read_text())
    assert stats["cache"]["evictions"] > 0, stats["cache"]
    # flat memory once warm: the last third's peak within 32 MiB of the
    # middle third's. The first third is warm-up: 16 threads and more
    # (io_uring's pools grow) each take their caches (ASan's per-thread
    # allocator cache, a decode window); anonymous memory climbed 24 -> 107
    # MiB in it, then 107 -> 127 -> 139 (ASan, io_uring). First third against
    # last, that was 25-37 MiB on this build and on the one before it, so the
    # same limit there failed now and then on both.
    third = len(rss) // 3
    assert third >= 3, rss
    early, late = max(rss[third:2 * third]), max(rss[-third:])
    print(f"stress: {reads} reads, cache {stats['cache']}, rss KiB early {early} late {late}")
    assert late - early < 32 * 1024, (early, late, rss)
    assert fingerprint(src) == before
