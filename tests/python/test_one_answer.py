"""One answer per path (issue 39): the bytes, size and type a path of a tar
shows never depend on what was looked up or listed before. Tars are
generated with every way a tar names a member (header name, ustar prefix,
GNU long name, pax `path`, two pax records before one header, later
members replacing earlier ones, renamed members taking an earlier
member's name), written by Python's tarfile with the records put before
headers by hand; each is read lookup-first and listing-first, through the
mount (a view never used before each time) and through the module, alone
and as a fold with its .taridx, and compared with what GNU tar extracts
(and, where no header has two records, with what tarfile extracts: the
later member of a path wins)."""
import io
import os
import random
import shutil
import subprocess
import tarfile

from conftest import mount, BUILD  # noqa: F401  (the fixture)
import shardfs

TOOLS = BUILD / "tools"
SEEDS = range(16)
POOL = ["a.txt", "b.txt", "c.bin", "x", "l" * 120 + ".txt", "m" * 150,
        "d/a.txt", "p" * 60 + "/" + "q" * 60 + ".txt"]
KEYED = POOL[:3]
FORMATS = [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT]


def record(kind, data):
    """A 'x' or 'L' extension record: header and padded data."""
    ti = tarfile.TarInfo("././@PaxHeader" if kind == tarfile.XHDTYPE else "././@LongLink")
    ti.type, ti.size = kind, len(data)
    return ti.tobuf(tarfile.USTAR_FORMAT) + data + tarfile.NUL * (-len(data) % 512)


def pax(**kv):
    body = b""
    for k, v in kv.items():
        rec = f" {k}={v}\n".encode()
        n = len(rec) + 1
        while len(str(n)) + len(rec) != n:
            n += 1
        body += str(n).encode() + rec
    return record(tarfile.XHDTYPE, body)


def member(rng, fmt, i):
    """(bytes of one member with the records before it, whether it has
    two records before its header)."""
    name = rng.choice(POOL)
    data = f"{i}:{name}\n".encode() * rng.randint(1, 3)
    how = rng.choice(["plain", "plain", "pax", "gnu", "twice"])
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime = len(data), 1_700_000_000
    body = data + tarfile.NUL * (-len(data) % 512)
    if how == "plain" or len(name) > 100:
        if fmt == tarfile.USTAR_FORMAT and len(name) > 100 and "/" not in name:
            fmt = tarfile.PAX_FORMAT  # ustar cannot hold it
        return ti.tobuf(fmt, "utf-8", "surrogateescape") + body, False
    # the header's name field says another name of the pool; records rename it
    ti.name = rng.choice([n for n in POOL if len(n) <= 100])
    head = ti.tobuf(tarfile.USTAR_FORMAT) + body
    if how == "pax":
        return pax(path=name) + head, False
    if how == "gnu":
        return record(tarfile.GNUTYPE_LONGNAME, name.encode() + b"\0") + head, False
    return pax(path=rng.choice(POOL)) + pax(path=name) + head, True


def write_tar(path, seed):
    """A tar of 6 to 14 members; True when some header has two records."""
    rng = random.Random(seed)
    fmt = rng.choice(FORMATS)
    out, twice = [], False
    for i in range(rng.randint(6, 14)):
        b, t = member(rng, fmt, i)
        out.append(b)
        twice |= t
    path.write_bytes(b"".join(out) + tarfile.NUL * 1024)
    return twice


def extracted(tar, tmp):
    """{path: bytes} of the regular files GNU tar extracts."""
    out = tmp / "x"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    subprocess.run(["tar", "-xf", str(tar), "-C", str(out)], check=True, capture_output=True,
                   timeout=60)
    files = {}
    for d, _, names in os.walk(out):
        for n in names:
            p = os.path.join(d, n)
            files[os.path.relpath(p, out)] = open(p, "rb").read()
    return files


def by_tarfile(tar):
    files = {}
    with tarfile.open(tar) as t:
        for m in t.getmembers():
            if m.isreg():
                files[m.name] = t.extractfile(m).read()
            else:
                files.pop(m.name, None)
    return files


def views(src, tmp):
    """Per seed: ({path: bytes} expected, [(lone view, fold view) for the
    lookup-first and the listing-first reader]). Each tar is written four
    times, so that each reader meets views never used."""
    cases = []
    for seed in SEEDS:
        one = tmp / f"t{seed}.tar"
        twice = write_tar(one, seed)
        want = extracted(one, tmp)
        if not twice:
            assert by_tarfile(one) == want, "GNU tar and tarfile disagree"
        pair = []
        for side in "ab":
            lone = f"t{seed}{side}"
            shutil.copy(one, src / f"{lone}.tar")
            fold = f"f{seed}{side}"
            shutil.copy(one, src / f"{fold}_0.tar")
            p = subprocess.run([str(TOOLS / "shardfs-taridx"), "--quiet", str(src), fold],
                               capture_output=True, timeout=60)
            assert p.returncode == 0, p.stderr
            pair.append((lone, fold))
        cases.append((want, pair))
    return cases


def lookup_order(want, rng):
    """Every name of the tar and of the pool not in it, in random order,
    but the names the index can key first: a name the index cannot key
    (a directory's, one without a stem or over 100 bytes) sends the
    lookup to the listing, after which no lookup shows the bug."""
    names = sorted(set(want) | set(POOL))
    rng.shuffle(names)
    return sorted(names, key=lambda n: n not in KEYED)


def test_lookup_first_equals_listing_first_mounted(mount, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    cases = views(src, tmp_path)
    mnt = mount(src)
    rng = random.Random(39)
    for want, ((lone_a, fold_a), (lone_b, fold_b)) in cases:
        names = lookup_order(want, rng)
        for view in (lone_a, fold_a):
            for n in names:
                p = mnt / view / n
                if n in want:
                    assert p.is_file() and not p.is_symlink(), (view, n)
                    assert p.stat().st_size == len(want[n]), (view, n)
                    assert p.read_bytes() == want[n], (view, n)
                else:
                    assert not os.path.lexists(p), (view, n)
        for view in (lone_b, fold_b):
            got = {}
            for d, _, files in os.walk(mnt / view):
                for f in files:
                    got[os.path.relpath(os.path.join(d, f), mnt / view)] = None
            assert set(got) == set(want), view
            for n in names:
                p = mnt / view / n
                assert (p.read_bytes() if n in want else os.path.lexists(p)) == want.get(n, False), (view, n)


def test_lookup_first_equals_listing_first_module(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    cases = views(src, tmp_path)
    rng = random.Random(93)
    for want, ((lone_a, fold_a), (lone_b, fold_b)) in cases:
        names = lookup_order(want, rng)
        for first_list, conts in ((False, (f"{lone_a}.tar", f"{fold_a}.taridx")),
                                  (True, (f"{lone_b}.tar", f"{fold_b}.taridx"))):
            for cont in conts:
                with shardfs.View(src / cont) as v:
                    if first_list:
                        listed = {os.path.join(d, f) if d else f
                                  for d, _, fs in v.walk() for f in fs}
                        assert listed == set(want), cont
                    for n in names:
                        if n in want:
                            assert v.isfile(n) and v.stat(n).size == len(want[n]), (cont, n)
                            assert v.read(n) == want[n], (cont, n)
                        else:
                            assert not v.exists(n), (cont, n)
