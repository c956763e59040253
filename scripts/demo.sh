#!/usr/bin/env bash
# Sets everything up, writes a small sample directory with one file of each
# format (made by the project's own test-data writers), mounts it at ./mnt
# and shows what is inside. Unmount with: fusermount3 -u mnt
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build

sample=$PWD/sample
mnt=$PWD/mnt
if grep -qs " $mnt fuse" /proc/mounts; then
  fusermount3 -u "$mnt"
fi
rm -rf "$sample"
mkdir -p "$sample" "$mnt"
for w in tests/writers/*_writer.py; do
  [ -e "$w" ] || continue
  /usr/bin/python3 "$w" --sample "$sample" >/dev/null
done
echo "sample: $(find "$sample" -type f | wc -l) files in $sample"

build/fs/shardfs "$sample" "$mnt"
echo "mounted $sample at $mnt"
echo
echo "== the tree (directories and files, sizes in bytes) =="
(cd "$mnt" && find . -mindepth 1 -maxdepth 4 -printf '%y %10s  %p\n' | sort -k3 | head -80)
echo
echo "== a few things to try =="
show() { echo "\$ $*"; (cd "$mnt" && eval "$@") 2>&1 | head -8; echo; }
for d in "$mnt"/*/; do
  [ -f "$d.shardfs/info.txt" ] || continue
  show "head -5 $(basename "$d")/.shardfs/info.txt"
done
show "cat .shardfs/stats.json | head -12"
echo "unmount with: fusermount3 -u mnt"
