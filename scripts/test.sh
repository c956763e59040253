#!/usr/bin/env bash
# Sets everything up and runs every test under ASan+UBSan: the C unit tests,
# then the mounted integration tests, once over /dev/fuse (the default) and
# once over FUSE over io_uring (the option --io-uring on; as root: the pass
# turns the kernel's switch on and back);
# then the unit and mounted tests again on an optimised (-O3) build, the
# fuzz targets briefly, the scale check (its own tests first) and the Debian packages (built with
# their tests, installed, used, purged), and the README's demo (scripts/demo.sh).
# The last line is "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
build=build-test
scripts/setup.sh "$build" -Db_sanitize=address,undefined -Db_lundef=false -Dpython=/usr/bin/python3 || {
  echo "0 passed, 1 failed"; exit 1; }

export SHARDFS_BUILD="$PWD/$build"
# A small quarantine keeps the daemon's resident memory near what it allocates,
# so the memory-budget tests measure shardfs and not ASan's bookkeeping.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:quarantine_size_mb=8"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

meson test -C "$build" --no-rebuild --print-errorlogs >"$build/unit.log" 2>&1
tail -n 12 "$build/unit.log"

# Debian's python3 has the test libraries; another python3 may come first on PATH.
/usr/bin/python3 -m pytest tests/integration -q -p no:cacheprovider \
  --junitxml="$build/pytest.xml" "$@"

# --- the Python module (tests/python, docs/python.md), against mounts of
# the same build: the ASan-built extension needs the ASan runtime loaded
# before the interpreter starts, and leak checks stay off for this pass (the
# interpreter's own allocations would count as leaks).
rm -f "$build/pytest-python.xml"
LD_PRELOAD="$(gcc -print-file-name=libasan.so)" \
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:quarantine_size_mb=8" \
  /usr/bin/python3 -m pytest tests/python -q -p no:cacheprovider \
  --junitxml="$build/pytest-python.xml" "$@"

# --- the mounted tests again over FUSE over io_uring (fs/transport/uring.c): every
# mount asks for it (--io-uring on), with the kernel's switch turned on for
# the pass and put back.
switch=/sys/module/fuse/parameters/enable_uring
rm -f "$build/pytest-io_uring.xml"
if old=$(cat "$switch" 2>/dev/null) && echo Y 2>/dev/null > "$switch"; then
  trap 'echo "$old" > "$switch"' EXIT
  SHARDFS_IO_URING=on /usr/bin/python3 -m pytest tests/integration -q -p no:cacheprovider \
    --junitxml="$build/pytest-io_uring.xml" "$@"
  echo "$old" > "$switch"
  trap - EXIT
else
  echo "io_uring pass: cannot turn on $switch (needs root and Linux 6.14+ with CONFIG_FUSE_IO_URING)"
fi

# --- fuzzing: every libFuzzer target for a few seconds (clang, ASan+UBSan),
# one result per target. Long runs: tests/fuzz/run.sh 600.
rm -f "$build/fuzz.json"
FUZZ_BUILD=build-fuzz FUZZ_RESULTS="$PWD/$build/fuzz.json" \
  tests/fuzz/run.sh "${FUZZ_SECONDS:-15}"

# --- a release build (-O3) must stay warning-free too: optimisation finds
# warnings (maybe-uninitialized) the debug build does not. Its unit tests and
# the mounted suite run on it as well: timing and uninitialised memory show
# differently without the sanitizers.
rm -rf build-release
if out=$(meson setup build-release --buildtype=release -Dpython=/usr/bin/python3 2>&1 && ninja -C build-release 2>&1); then
  result=OK
else
  result=FAIL
  echo "$out" | grep -E "error|warning" | head -20
fi
echo "{\"name\": \"release build\", \"result\": \"$result\"}" > "$build/release.json"
echo "release build: $result"
meson test -C build-release --print-errorlogs >"$build/unit-release.log" 2>&1
tail -n 8 "$build/unit-release.log"
rm -f "$build/pytest-release.xml"
SHARDFS_BUILD="$PWD/build-release" /usr/bin/python3 -m pytest tests/integration -q \
  -p no:cacheprovider --junitxml="$build/pytest-release.xml" "$@"
rm -f "$build/pytest-python-release.xml"
SHARDFS_BUILD="$PWD/build-release" /usr/bin/python3 -m pytest tests/python -q \
  -p no:cacheprovider --junitxml="$build/pytest-python-release.xml" "$@"

# --- the benchmark suite's smoke test (README's run.py --quick): every
# group runs on small data and prints its rows; figures are not judged
rm -f "$build/pytest-bench.xml"
SHARDFS_BUILD="$PWD/build-release" /usr/bin/python3 -m pytest tests/bench/test_bench_smoke.py -q \
  -p no:cacheprovider --junitxml="$build/pytest-bench.xml" "$@"

# --- scale (issue 19): what the release daemon keeps per fold member and
# per container, CI-sized (200,000 members, 5,000 containers); the full-size
# cases are tests/bench/run.py --only fold,fold10m,containers. Its own tests
# first: a measure reads the memory of what it measures, not the checker's.
rm -f "$build/pytest-scale.xml"
SHARDFS_BUILD="$PWD/build-release" /usr/bin/python3 -m pytest tests/scale/test_check.py -q \
  -p no:cacheprovider --junitxml="$build/pytest-scale.xml" "$@"
/usr/bin/python3 tests/scale/check.py build-release "$build/scale.json"

# --- the Debian packages: built, checked by lintian, installed, used
# through mount -t fuse.shardfs, and purged again
rm -f "$build/deb.json"
scripts/test_deb.sh "$build/deb.json"

# --- the README's first command: the sample written, mounted at ./mnt and
# shown (a compressed tar's member among what it shows), then unmounted
rm -f "$build/demo.json"
if timeout 900 bash scripts/demo.sh >"$build/demo.log" 2>&1 &&
   grep -q "hello from inside a .tar.gz" "$build/demo.log"; then
  result=OK
else
  result=FAIL
  tail -20 "$build/demo.log"
fi
fusermount3 -u mnt 2>/dev/null || fusermount3 -uz mnt 2>/dev/null || true
echo "{\"name\": \"demo\", \"result\": \"$result\"}" > "$build/demo.json"
echo "demo: $result"

/usr/bin/python3 tests/summarize.py "$build/meson-logs/testlog.json" "$build/pytest.xml" \
  "mounted over io_uring=$build/pytest-io_uring.xml" "python=$build/pytest-python.xml" \
  "fuzz=$build/fuzz.json" "release=$build/release.json" \
  "unit release=build-release/meson-logs/testlog.json" \
  "mounted release=$build/pytest-release.xml" \
  "python release=$build/pytest-python-release.xml" "bench smoke=$build/pytest-bench.xml" \
  "scale tests=$build/pytest-scale.xml" "scale=$build/scale.json" \
  "packages=$build/deb.json" "demo=$build/demo.json"
