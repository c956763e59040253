#!/usr/bin/env bash
# Installs what shardfs needs to build and test on Debian, then builds it.
# Usage: scripts/setup.sh [BUILD_DIR] [meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  meson ninja-build pkg-config gcc clang libclang-rt-14-dev
  libfuse3-dev fuse3 liburing-dev libzstd-dev liblz4-dev libxxhash-dev libjansson-dev
  zlib1g-dev liblzma-dev libbz2-dev pigz pbzip2 lz4 xz-utils bzip2
  python3 python3-dev python3-pytest python3-numpy python3-zarr python3-xarray python3-dask python3-xxhash python3-zstandard python3-lz4 zstd
  python3-torch python3-pil strace libarchive-tools
  debhelper dpkg-dev lintian
  glusterfs-server glusterfs-client
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  # no recommends: python3-torch would bring in some 50 more packages (media codecs)
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ ! -e /dev/fuse ]; then
  echo "setup: /dev/fuse is missing: shardfs can build, but not mount here" >&2
fi

build=${1:-build}
shift || true
if [ ! -f "$build/build.ninja" ]; then
  out=$(meson setup "$build" "$@" 2>&1) || { echo "$out" >&2; exit 1; }
fi
out=$(ninja -C "$build" 2>&1) || { echo "$out" | tail -40 >&2; exit 1; }
echo "setup: built $build"
