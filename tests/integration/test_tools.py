"""The command-line tools (shardfs-inspect, -verify, -cat, -taridx), the
installed library, the mount helper and --ready-fd, against the fixtures,
the mount, and upstream's truth files."""
import hashlib
import json
import os
import shutil
import subprocess
import textwrap

import pytest

from conftest import BUILD, FIXTURES, REPO, SHARDFS, TOOLS, is_mounted, unmount

TOOL_NAMES = ("shardfs-cat", "shardfs-inspect", "shardfs-verify", "shardfs-taridx")
# The PATH mount(8) gives its helpers.
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def tool(name, *args, check=True):
    r = subprocess.run([str(TOOLS / name), *map(str, args)], capture_output=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r


def sha256(b):
    return hashlib.sha256(b).hexdigest()


# Fixture containers of every format, with the view directory each gets.
CONTAINERS = [
    ("tet", "sample.tet", "sample"),
    ("tet", "large.tet", "large"),
    ("tatami", "g01_alltypes.tatami", "g01_alltypes"),
    ("tatami", "g02_blob.tatami", "g02_blob"),
    ("tsumugi", "gold_prod.tsumugi", "gold_prod"),
    ("taridx/small", "train.taridx", "train"),
    ("shardlake/main/indexes/idx-c-pq", None, None),
]


def containers():
    """(fixture dir, file, view) for each container above (every .sidx of
    the Shardlake index directory, whose manifest lies inside the mount)."""
    for sub, name, view in CONTAINERS:
        if name:
            yield sub, name, view
        else:
            for f in sorted(os.listdir(FIXTURES / sub / "shards")):
                if f.endswith(".sidx"):
                    yield sub, "shards/" + f, "shards/" + f[:-5]


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_help_and_bad_command_lines(name):
    r = tool(name, "--help")
    assert r.stdout.startswith(f"usage: {name}".encode())
    bad = tool(name, check=False)
    assert bad.returncode == 2 and b"usage:" in bad.stderr


def test_inspect_and_cat_show_what_the_mount_shows(mount):
    mounts = {}
    for sub, name, view in containers():
        if sub not in mounts:
            mounts[sub] = mount(FIXTURES / sub)
        path = FIXTURES / sub / name
        meta = mounts[sub] / view / ".shardfs"
        txt, js = (meta / "info.txt").read_bytes(), (meta / "info.json").read_bytes()
        # a summary may name the container (or a file beside it) by the path
        # it was opened by: the tool's argument, or the path inside the mount
        inner = os.path.dirname(name)
        def same(out):
            return out.replace(str(path).encode(), name.encode()).replace(
                str(path.parent).encode() + b"/", (inner or ".").encode() + b"/")
        assert same(tool("shardfs-inspect", path).stdout) == txt
        assert same(tool("shardfs-inspect", "--json", path).stdout) == js
        assert same(tool("shardfs-cat", path, ".shardfs/info.txt").stdout) == txt
        json.loads(js)


def test_inspect_json_of_several_files_is_an_array_of_each():
    files = [FIXTURES / "tet" / "sample.tet", FIXTURES / "taridx" / "small" / "train.taridx"]
    many = json.loads(tool("shardfs-inspect", "--json", *files).stdout)
    assert many == [json.loads(tool("shardfs-inspect", "--json", f).stdout) for f in files]
    # the header fields are upstream's
    truth = json.loads((FIXTURES / "taridx" / "EXPECTED.json").read_text())
    header = truth["cases"]["small"]["folds"]["train"]["header"]
    for k in ("magic", "major", "minor", "n_stems", "n_rows", "n_ext", "off_arr", "flags"):
        assert many[1]["header"][k] == header[k], k
    text = tool("shardfs-inspect", *files).stdout.decode()
    assert text.startswith(f"==> {files[0]} <==\n") and f"\n==> {files[1]} <==\n" in text


def test_inspect_fails_on_what_does_not_open(tmp_path):
    torn = tmp_path / "torn.tet"
    torn.write_bytes((FIXTURES / "tet" / "large.tet").read_bytes()[:5000])
    r = tool("shardfs-inspect", torn, FIXTURES / "tet" / "sample.tet", check=False)
    assert r.returncode == 1 and b"torn.tet" in r.stderr
    assert b"sample.tet" in r.stdout


def test_verify_agrees_with_upstream_on_the_tet_fixtures():
    truth = json.loads((FIXTURES / "tet" / "EXPECTED.json").read_text())
    for f in truth["files"]:
        path = FIXTURES / "tet" / f["file"]
        r = tool("shardfs-verify", path, check=False)
        first = r.stdout.decode().splitlines()[0]
        if f["upstream_verify"] == "ok":
            assert (r.returncode, first) == (0, f"{path}: status: ok"), r.stdout
        else:
            assert (r.returncode, first) == (1, f"{path}: status: failed"), r.stdout


def test_verify_finds_a_flipped_byte_and_reports_per_file(tmp_path):
    """A byte flipped inside a stored region (position from upstream's
    truth) fails the check; the intact file beside still verifies."""
    good = FIXTURES / "tsumugi" / "gold_prod.tsumugi"
    truth = json.loads((FIXTURES / "tsumugi" / "gold_prod.tsumugi.truth.json").read_text())
    region = truth["regions"][2]
    data = bytearray(good.read_bytes())
    data[region["offset"] + region["length"] // 2] ^= 0x40
    bad = tmp_path / "gold_prod.tsumugi"
    bad.write_bytes(bytes(data))
    assert tool("shardfs-verify", good).stdout == f"{good}: status: ok\n".encode()
    r = tool("shardfs-verify", good, bad, check=False)
    lines = r.stdout.decode().splitlines()
    assert r.returncode == 1
    assert lines[0] == f"{good}: status: ok"
    assert lines[1] == f"{bad}: status: failed"
    assert len(lines) >= 3 and all(line.startswith(f"{bad}: ") for line in lines[1:])
    quiet = tool("shardfs-verify", "--quiet", good, bad, check=False)
    assert quiet.returncode == 1 and quiet.stdout.decode().splitlines() == lines[1:]
    assert tool("shardfs-verify", "-q", good).stdout == b""
    missing = tool("shardfs-verify", tmp_path / "none.tet", check=False)
    assert missing.returncode == 1 and b"status: failed" in missing.stdout


def test_cat_serves_upstream_region_bytes_and_every_view_file(mount):
    path = FIXTURES / "tsumugi" / "gold_prod.tsumugi"
    truth = json.loads((FIXTURES / "tsumugi" / "gold_prod.tsumugi.truth.json").read_text())
    kinds = {1: "lexical", 2: "forward", 3: "feature", 4: "graph", 5: "vector"}
    checked = 0
    for r in truth["regions"]:
        if r.get("first_of_kind") and r["kind"] in kinds:
            out = tool("shardfs-cat", path, f"regions/{kinds[r['kind']]}").stdout
            assert sha256(out) == r["decoded_sha256"]
            checked += 1
    assert checked >= 4
    # files --list names read the same through the tool as through the mount:
    # all of a small file, and an even spread of a large one (a process each)
    mnt = mount(FIXTURES / "tatami")
    for name, step in (("g06_tiny", 1), ("g02_blob", 60)):
        src = FIXTURES / "tatami" / f"{name}.tatami"
        listing = tool("shardfs-cat", "--list", src).stdout.decode().splitlines()
        files = [line.split("\t")[0] for line in listing if "\t" in line]
        assert len(files) >= 10
        for f in files[::step]:
            assert tool("shardfs-cat", src, f).stdout == (mnt / name / f).read_bytes(), f
    missing = tool("shardfs-cat", src, "no/such/part", check=False)
    assert missing.returncode == 1 and b"no/such/part" in missing.stderr


def test_taridx_tool_writes_upstreams_index(tmp_path):
    case = json.loads((FIXTURES / "taridx" / "EXPECTED.json").read_text())["cases"]["small"]
    fold = case["folds"]["train"]
    for tar in fold["tars_in_fid_order"]:
        shutil.copy(FIXTURES / "taridx" / "small" / tar, tmp_path / tar)
    tool("shardfs-taridx", "--quiet", tmp_path, "train")
    assert sha256((tmp_path / "train.taridx").read_bytes()) == fold["taridx_sha256"]


def sanitizer_flags():
    """The -fsanitize flags of the build, so a program linked against its
    library links the same runtime."""
    opts = json.loads(subprocess.run(["meson", "introspect", "--buildoptions", str(BUILD)],
                                     capture_output=True, text=True, check=True).stdout)
    san = next((o["value"] for o in opts if o["name"] == "b_sanitize"), "none")
    return [] if san in ("none", "") else [f"-fsanitize={san}"]


def test_meson_install_and_a_program_built_with_pkg_config(tmp_path):
    dest = tmp_path / "dest"
    subprocess.run(["meson", "install", "-C", str(BUILD), "--no-rebuild", "--quiet",
                    "--destdir", str(dest)], check=True, capture_output=True, timeout=300)
    installed = {str(p.relative_to(dest)) for p in dest.rglob("*")}
    def one(suffix):
        hits = sorted(p for p in installed if p.endswith(suffix))
        assert hits, f"nothing installed ends with {suffix}"
        return dest / hits[0]
    for name in ("shardfs", *TOOL_NAMES):
        assert os.access(one("/bin/" + name), os.X_OK)
    assert os.access(one("/sbin/mount.fuse.shardfs"), os.X_OK)
    for page in ("shardfs.1", *(n + ".1" for n in TOOL_NAMES)):
        one("/man1/" + page)
    one("/include/shardfs/shardfs.h")
    pc = one("/pkgconfig/shardfs-format.pc")
    lib = one("/libshardfs-format.so")
    env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent), PKG_CONFIG_SYSROOT_DIR=str(dest))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "shardfs-format"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    exe = tmp_path / "shardfs_tree"
    subprocess.run(["cc", *sanitizer_flags(), str(REPO / "examples" / "c_api" / "shardfs_tree.c"),
                    *flags, "-o", str(exe)], check=True, timeout=120)
    run_env = dict(os.environ, LD_LIBRARY_PATH=str(lib.parent))
    for sub, name, _ in containers():
        path = FIXTURES / sub / name
        tree = subprocess.run([str(exe), str(path)], env=run_env, capture_output=True,
                              timeout=60, check=True).stdout
        assert tree == tool("shardfs-cat", "--list", path).stdout
    path = FIXTURES / "tet" / "large.tet"
    part = subprocess.run([str(exe), str(path), "a.npy"], env=run_env, capture_output=True,
                          timeout=60, check=True).stdout
    assert part == tool("shardfs-cat", path, "a.npy").stdout and len(part) > 34 * 64 * 4


MOUNT_OPTS = "ro,allow_other,defaults,dev,suid,rw,exec,nofail,_netdev,x-systemd.automount,comment=x"


def mount_options(mnt):
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == os.path.realpath(mnt):
                return fields[2], set(fields[3].split(","))
    return None, set()


def test_mount_helper_as_mount8_runs_it(tmp_path):
    """The helper with fstab's options and the environment mount(8) gives it."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    helper = TOOLS / "mount.fuse.shardfs-uninstalled"
    src = FIXTURES / "tet"
    try:
        subprocess.run(["env", "-i", f"PATH={STD_PATH}", "/bin/sh", str(helper), str(src),
                        str(mnt), "-o", MOUNT_OPTS], check=True, timeout=60)
        kind, opts = mount_options(mnt)
        assert kind == "fuse.shardfs"
        assert {"ro", "allow_other"} <= opts and "rw" not in opts
        # MOUNT_OPTS says dev,suid: the daemon mounts nosuid,nodev whatever
        assert {"nosuid", "nodev"} <= opts and not {"suid", "dev"} & opts
        assert (mnt / "sample" / ".zgroup").read_bytes() == \
            tool("shardfs-cat", src / "sample.tet", ".zgroup").stdout
    finally:
        unmount(mnt)
    assert not is_mounted(mnt)


def test_mount_t_fuse_shardfs_and_an_fstab_line(tmp_path):
    """Real mount(8), in a private mount namespace where our helper appears in
    /sbin (an overlay) and shardfs in /usr/local/bin: `mount -t fuse.shardfs`
    through our helper, and an fstab line through /sbin/mount.fuse alone."""
    add_sbin, add_bin = tmp_path / "sbin", tmp_path / "bin"
    add_sbin.mkdir()
    add_bin.mkdir()
    shutil.copy(TOOLS / "mount.fuse.shardfs-uninstalled", add_sbin / "mount.fuse.shardfs")
    os.chmod(add_sbin / "mount.fuse.shardfs", 0o755)
    os.symlink(SHARDFS, add_bin / "shardfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    src = FIXTURES / "tatami"
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{src} {mnt} fuse.shardfs defaults,allow_other,nofail 0 0\n")
    sbin = os.path.realpath("/sbin")
    script = textwrap.dedent(f"""\
        set -e
        trap 'fusermount3 -u {mnt} 2>/dev/null || true' EXIT
        mount -t overlay overlay -o lowerdir={add_sbin}:{sbin} {sbin}
        mount -t overlay overlay -o lowerdir={add_bin}:/usr/local/bin /usr/local/bin
        mount -t fuse.shardfs {src} {mnt} -o ro,allow_other,suid,dev
        echo "helper: $(grep " {mnt} " /proc/self/mounts)"
        cat {mnt}/g06_tiny/rows.jsonl
        fusermount3 -u {mnt}
        # without our helper: mount(8) falls back to /sbin/mount.fuse
        umount {sbin}
        mount -T {fstab} {mnt}
        echo "fstab: $(grep " {mnt} " /proc/self/mounts)"
        cat {mnt}/g06_tiny/rows.jsonl
        fusermount3 -u {mnt}
        """)
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = tool("shardfs-cat", src / "g06_tiny.tatami", "rows.jsonl").stdout.decode()
    lines = r.stdout.splitlines()
    for label in ("helper", "fstab"):
        at = next(i for i, line in enumerate(lines) if line.startswith(label + ": "))
        fields = lines[at].split()
        assert fields[1:4] == [str(src), str(mnt), "fuse.shardfs"]
        assert {"ro", "allow_other", "nosuid", "nodev"} <= set(fields[4].split(","))
        assert "\n".join(lines[at + 1:at + 1 + rows.count("\n")]) + "\n" == rows
    assert not is_mounted(mnt)


def test_ready_fd_says_ready_once_mounted_and_nothing_on_failure(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r, w = os.pipe()
    proc = subprocess.Popen([str(SHARDFS), str(FIXTURES / "tet"), str(mnt), "-f",
                             "--ready-fd", str(w)], pass_fds=(w,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as f:
            assert f.readline() == b"ready\n"
            assert is_mounted(mnt)
            assert f.read() == b""
        assert (mnt / "sample.tet").exists()
    finally:
        unmount(mnt)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        proc.stderr.close()
    (mnt / "occupied").write_text("x")
    r, w = os.pipe()
    proc = subprocess.Popen([str(SHARDFS), str(FIXTURES / "tet"), str(mnt), "--ready-fd", str(w)],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        assert f.read() == b""
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and b"not empty" in err
    assert tool_exit(SHARDFS, "x", "y", "--ready-fd", "999") == 2


def tool_exit(exe, *args):
    return subprocess.run([str(exe), *args], capture_output=True, timeout=30).returncode
