#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each for a
# fixed time, seeded from the fixtures, the test-data writers' samples and
# the kept regression inputs.
#
#   tests/fuzz/run.sh [SECONDS] [fmt...]     default 60 s, every target built
#
# Env: FUZZ_BUILD (build dir, default build-fuzz), FUZZ_ARGS (more libFuzzer
# flags), FUZZ_RESULTS (append one
# meson-testlog-style JSON line per target there, for tests/summarize.py).
# The corpus a run grows is kept in $FUZZ_BUILD/corpus/<fmt>/, crashes in
# $FUZZ_BUILD/artifacts/<fmt>/. Exits non-zero when any target finds anything.
set -uo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}
shift || true
build=${FUZZ_BUILD:-build-fuzz}
fixtures=${SHARDFS_FIXTURES:-$PWD/tests/fixtures}
formats="${SHARDFS_FORMATS:-}"

record() {
  [ -n "${FUZZ_RESULTS:-}" ] && printf '{"name": "%s", "result": "%s", "duration": %s}\n' \
    "$1" "$2" "$3" >>"$FUZZ_RESULTS"
  return 0
}

if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" -Dfuzz=true -Db_sanitize=address,undefined \
    -Db_lundef=false ${formats:+-Dformats=$formats} >"$build.setup.log" 2>&1 || {
    tail -20 "$build.setup.log" >&2; record fuzz_setup FAIL 0; exit 1; }
fi
targets=$(meson introspect "$build" --targets | /usr/bin/python3 -c '
import json, sys
print(" ".join(sorted(t["name"][5:] for t in json.load(sys.stdin)
                      if t["name"].startswith("fuzz_") and t["type"] == "executable")))')
[ $# -gt 0 ] && targets="$*"

# A seed directory per format: fixture files, writer samples, regressions.
seeds() {
  local fmt=$1 dir=$build/seeds/$1
  rm -rf "$dir"
  mkdir -p "$dir/writer"
  [ -d "$fixtures/$fmt" ] && find "$fixtures/$fmt" -type f -size -4M \
    -exec sh -c 'for f; do cp "$f" "$0/fixture-$(echo "$f" | md5sum | cut -c1-12)"; done' "$dir" {} +
  local w=tests/writers/${fmt}_writer.py
  [ -f "$w" ] && /usr/bin/python3 "$w" --sample "$dir/writer" >/dev/null 2>&1
  [ -d "tests/fuzz/regressions/$fmt" ] && cp -r "tests/fuzz/regressions/$fmt" "$dir/regressions"
  # fuzz_taridx takes <u16 LE index length><index><shard 0>, not a bare
  # index: build such inputs from each fixture/sample index and its _0000.tar
  [ "$fmt" = taridx ] && mkdir -p "$dir/split" && /usr/bin/python3 - "$dir/split" \
    "$fixtures/taridx" "$dir/writer" <<'EOF'
import hashlib, os, sys
out = sys.argv[1]
for top in sys.argv[2:]:
    for d, _, names in os.walk(top):
        for n in names:
            tar = os.path.join(d, n[:-len(".taridx")] + "_0000.tar")
            if not n.endswith(".taridx") or not os.path.exists(tar):
                continue
            idx = open(os.path.join(d, n), "rb").read()
            if len(idx) > 0xFFFF or os.path.getsize(tar) > 4 << 20:
                continue
            blob = len(idx).to_bytes(2, "little") + idx + open(tar, "rb").read()
            open(os.path.join(out, hashlib.md5(blob).hexdigest()[:12]), "wb").write(blob)
EOF
  echo "$dir"
}

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
status=0
for fmt in $targets; do
  if ! ninja -C "$build" "tests/fuzz/fuzz_$fmt" >"$build/fuzz-build-$fmt.log" 2>&1; then
    tail -20 "$build/fuzz-build-$fmt.log" >&2
    echo "fuzz $fmt: does not build"
    record "fuzz_$fmt" FAIL 0
    status=1
    continue
  fi
  corpus=$build/corpus/$fmt art=$build/artifacts/$fmt/
  mkdir -p "$corpus" "$art"
  seeddir=$(seeds "$fmt")
  # libFuzzer reads subdirectories of its corpus dirs only one level deep: flatten
  find "$seeddir" -mindepth 2 -type f -exec sh -c \
    'for f; do mv "$f" "$0/s-$(echo "$f" | md5sum | cut -c1-12)"; done' "$seeddir" {} +
  log=$build/fuzz-$fmt.log
  start=$(date +%s.%N)
  # malloc_limit above rss_limit: a large allocation whose pages are never
  # touched is not a finding by itself (tet verify: see regressions/tet/)
  "$build/tests/fuzz/fuzz_$fmt" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$art" ${FUZZ_ARGS:-} "$corpus" "$seeddir" >"$log" 2>&1
  rc=$?
  dur=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  if [ $rc -eq 0 ]; then
    echo "fuzz $fmt: ${runs:-?} runs in ${secs} s, no finding"
    result=OK
  else
    echo "fuzz $fmt: FINDING (exit $rc), see $log and $art"
    grep -m1 -E "ERROR: |runtime error|deadly signal|timeout" "$log"
    result=FAIL status=1
  fi
  record "fuzz_$fmt" "$result" "$dur"
done
exit $status
