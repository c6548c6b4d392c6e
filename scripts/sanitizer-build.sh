#!/usr/bin/env bash
# Builds TARGETs into build-sanitize/ with Clang, AddressSanitizer (with
# LeakSanitizer), UBSan and libFuzzer's coverage: the one build that both
# scripts/sanitize.sh (the test suite) and scripts/fuzz.sh (the fuzzers) use,
# so that the engine is compiled once for both. Installs Clang first
# (scripts/setup.sh --sanitizers). Exits 2, saying why, where Clang cannot
# build with libFuzzer (not Debian, no root); the log is build-sanitize/build.log.
#   scripts/sanitizer-build.sh TARGET...
set -euo pipefail
cd "$(dirname "$0")/.."
# A failed install (no root, no network) leaves the decision to the probe:
# a Clang already here still builds.
scripts/setup.sh --sanitizers > /dev/null || echo "sanitizers: warning: scripts/setup.sh --sanitizers failed (above)"
probe='extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }'
if ! command -v clang++ > /dev/null || ! clang++ -x c++ -fsanitize=fuzzer -o /dev/null - <<< "$probe" 2> /dev/null; then
  echo "sanitizers: skipped: no clang++ with libFuzzer here (Debian: clang and libclang-rt-14-dev)"
  exit 2
fi
mkdir -p build-sanitize
# The GPU backend stays out: its kernels are nvcc's, which these runtimes do not see.
# -O1 and line tables: what the sanitizers' authors advise (fast enough, exact
# lines in reports); asserts stay on.
CC=clang CXX=clang++ cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DTESSERA_FUZZ=ON \
  -DTESSERA_CUDA=OFF -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCH=OFF > build-sanitize/build.log 2>&1 ||
  { cat build-sanitize/build.log; exit 1; }
cmake --build build-sanitize --target "$@" >> build-sanitize/build.log 2>&1 || { tail -40 build-sanitize/build.log; exit 1; }
