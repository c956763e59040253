#!/usr/bin/env bash
# Builds the Debian packages (debian/) from a copy of the tree, checks them
# with lintian, installs them with apt-get, mounts a sample fold through the
# installed mount helper (mount -t fuse.shardfs), reads a member and its
# samples.jsonl, builds examples/c_api against the installed library, reads
# the same through the installed Python module (python3-shardfs), then
# unmounts and purges the packages and whatever they pulled in, leaving the
# installed package set as it was. Needs root (or sudo) and the build tools
# scripts/setup.sh installs. Last line: "debian packages: OK" or "... FAIL".
# Usage: scripts/test_deb.sh [RESULT_JSON]
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
result_json=${1:-}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
ours=(shardfs libshardfs-format0 libshardfs-format-dev python3-shardfs)

work=$(mktemp -d /tmp/shardfs-deb.XXXXXX)
mnt=$work/mnt
installed_new=()
finish() {
  local result=$1
  if grep -qs " $mnt fuse" /proc/mounts; then
    $SUDO umount "$mnt" || $SUDO umount -l "$mnt"
  fi
  if [ ${#installed_new[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get purge -y -qq -o DPkg::Lock::Timeout=600 \
      "${installed_new[@]}" >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; result=FAIL; }
    installed_new=()
    dpkg-query -W -f='${db:Status-Abbrev} ${Package}:${Architecture} ${Version}\n' \
      | sort >"$work/after.txt"
    if ! cmp -s "$work/before.txt" "$work/after.txt"; then
      echo "test_deb: the installed packages differ from before:"
      diff "$work/before.txt" "$work/after.txt" | head -20
      result=FAIL
    fi
  fi
  rm -rf "$work"
  [ -n "$result_json" ] && echo "{\"name\": \"debian packages\", \"result\": \"$result\"}" >"$result_json"
  echo "debian packages: $result"
  [ "$result" = OK ]
  exit $?
}
fail() {
  echo "test_deb: $*"
  finish FAIL
}
trap 'finish FAIL' INT TERM

# --- build from a copy: dpkg-buildpackage writes its .debs into ../
src=$work/shardfs
mkdir -p "$src"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$src" \
  || fail "cannot copy the tree"
# as README gives it: the build runs the unit tests (dh_auto_test) in
# Debian's own optimised, hardened build
(cd "$src" && DEB_BUILD_OPTIONS="parallel=2" \
  dpkg-buildpackage -b -us -uc >"$work/build.log" 2>&1) \
  || { tail -30 "$work/build.log"; fail "dpkg-buildpackage failed"; }
debs=()
for p in "${ours[@]}"; do
  f=$(ls "$work/${p}_"*.deb 2>/dev/null) || fail "no package $p was built"
  debs+=("$f")
done
lintian --fail-on error,warning "$work"/*.changes >"$work/lintian.log" 2>&1 \
  || { cat "$work/lintian.log"; fail "lintian found problems"; }
grep -E '^[EW]: ' "$work/lintian.log"

# --- install, use, remove: one run at a time on a machine
exec 9>/tmp/shardfs-test-deb.lock
flock 9
for p in "${ours[@]}"; do
  if dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
    fail "$p is installed already: this test would replace it"
  fi
done
dpkg-query -W -f='${db:Status-Abbrev} ${Package}:${Architecture} ${Version}\n' \
  | sort >"$work/before.txt"
dpkg-query -W -f='${Package}\n' | sort >"$work/names-before.txt"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  -o DPkg::Lock::Timeout=600 "${debs[@]}" >"$work/install.log" 2>&1
dpkg-query -W -f='${Package}\n' | sort >"$work/names-after.txt"
mapfile -t installed_new < <(comm -13 "$work/names-before.txt" "$work/names-after.txt")
grep -q . "$work/names-after.txt" && [ ${#installed_new[@]} -ge 4 ] \
  || { cat "$work/install.log"; fail "apt-get install failed"; }
echo "test_deb: installed ${installed_new[*]}"

sample=$work/sample
mkdir -p "$sample" "$mnt"
/usr/bin/python3 tests/writers/taridx_writer.py --sample "$sample" >/dev/null \
  || fail "cannot write the sample"
$SUDO mount -t fuse.shardfs "$sample" "$mnt" || fail "mount -t fuse.shardfs failed"
grep -qs " $mnt fuse.shardfs " /proc/mounts || fail "no fuse.shardfs mount at $mnt"
# the daemon serving it is the installed one
daemon=""
for pid in $(pgrep -x shardfs); do
  if tr '\0' ' ' </proc/"$pid"/cmdline | grep -q " $mnt"; then
    daemon=$(readlink /proc/"$pid"/exe)
  fi
done
[ "$daemon" = /usr/bin/shardfs ] || fail "the mount is served by '$daemon', not /usr/bin/shardfs"
[ "$(cat "$mnt/demo/000003.txt")" = "caption of sample 3" ] || fail "demo/000003.txt reads wrong"
cmp -s "$mnt/demo_0000.tar" "$sample/demo_0000.tar" || fail "demo_0000.tar differs through the mount"
head -1 "$mnt/demo/.shardfs/samples.jsonl" | grep -qx \
  '{"i": 0, "key": "000000", "members": {"txt": "000000.txt", "cls": "000000.cls"}}' \
  || fail "samples.jsonl reads wrong"
# the library and its pkg-config module, as a C program uses them
cc "$repo/examples/c_api/shardfs_tree.c" $(pkg-config --cflags --libs shardfs-format) \
  -o "$work/shardfs_tree" || fail "examples/c_api does not build against the installed library"
[ "$("$work/shardfs_tree" "$sample/demo.taridx" 000003.txt)" = "caption of sample 3" ] \
  || fail "examples/c_api reads wrong through the installed library"
# the Python module, installed: the same member, and the fold's samples
cd "$work"
[ "$(/usr/bin/python3 -c 'import shardfs, sys
with shardfs.open(sys.argv[1]) as v:
    f = v.fold()
    assert f[3] == {"txt": v.read("000003.txt"), "cls": v.read("000003.cls")}, f[3]
    sys.stdout.write(v.read("000003.txt").decode())' "$sample/demo.taridx")" = "caption of sample 3" ] \
  || fail "python3-shardfs reads wrong"
/usr/bin/python3 -c 'import shardfs; print(shardfs.__file__)' | grep -q '^/usr/lib/python3/dist-packages/shardfs/' \
  || fail "import shardfs does not find the installed module"
cd "$repo"
$SUDO umount "$mnt" || fail "umount failed"
echo "test_deb: mounted, read and unmounted through the installed packages"
finish OK
