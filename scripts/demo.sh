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
# one folder per format, so each view keeps its plain name
for fmt in tsumugi tatami taridx shardlake tet; do
  w=tests/writers/${fmt}_writer.py
  [ -e "$w" ] || continue
  mkdir -p "$sample/$fmt"
  /usr/bin/python3 "$w" --sample "$sample/$fmt" >/dev/null
done
# a compressed tar gets a view too (no index step)
mkdir -p "$sample/tars/backup"
echo "hello from inside a .tar.gz" > "$sample/tars/backup/hello.txt"
seq 1 1000 > "$sample/tars/backup/numbers.txt"
tar -czf "$sample/tars/backup.tar.gz" -C "$sample/tars" backup
rm -r "$sample/tars/backup"
echo "sample: $(find "$sample" -type f | wc -l) files in $sample"

build/fs/shardfs "$sample" "$mnt"
echo "mounted $sample at $mnt (views appear beside each container)"
echo
echo "== the tree, three levels deep =="
(cd "$mnt" && for fmt in */; do
  echo "-- $fmt"
  find "$fmt" -mindepth 1 -maxdepth 3 -printf '%y %8s  %p\n' | sort -k3 | head -24
done)
echo
echo "== a few things to try (in $mnt) =="
show() {
  echo "\$ $1"
  (cd "$mnt" && bash -c "$1") 2>&1 | head -"${2:-6}"
  echo
}
[ -d "$mnt/tsumugi/sample" ] && {
  show "cat tsumugi/sample/.shardfs/info.txt"
  show "head -c 120 tsumugi/sample/docs/0/body; echo"
  show "/usr/bin/python3 -c 'import numpy; print(numpy.load(\"tsumugi/sample/features.npy\", mmap_mode=\"r\").shape)'"
}
[ -d "$mnt/tatami/sample" ] && {
  show "ls tatami/sample/columns"
  show "head -3 tatami/sample/rows.jsonl"
}
[ -d "$mnt/taridx/demo" ] && {
  show "ls taridx/demo | head -4"
  show "cat taridx/demo/000000.txt; echo"
}
[ -d "$mnt/shardlake/aliases" ] && {
  show "ls shardlake/aliases; readlink shardlake/aliases/latest"
  show "head -3 shardlake/aliases/latest/shards/shard-0000/ids.txt"
}
[ -d "$mnt/tars/backup" ] && {
  show "ls tars; ls tars/backup/backup"
  show "cat tars/backup/backup/hello.txt; tail -2 tars/backup/backup/numbers.txt"
}
[ -d "$mnt/tet/weather" ] && show "cat tet/weather/.zgroup; ls tet/weather"
show "head -14 .shardfs/stats.json" 14
echo "unmount with: fusermount3 -u mnt"
