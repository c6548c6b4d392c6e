#!/usr/bin/env bash
# The whole test suite under AddressSanitizer (with LeakSanitizer) and UBSan:
# every CTest entry (the doctest cases, the CLI scripts, the MPI jobs) of the
# Clang build that the fuzzers share (scripts/sanitizer-build.sh). OpenMPI's
# own leaks are suppressed by library in tests/sanitizers/lsan.supp; a leak,
# overflow or undefined behaviour of Tessera's fails its test. Prints the
# totals and exits 1 when any test fails. Without Clang it says so and exits 0.
#   scripts/sanitize.sh [REGEX]   only the tests whose names match, e.g. checkpoint
set -euo pipefail
cd "$(dirname "$0")/.."
set +e
scripts/sanitizer-build.sh all
rc=$?
set -e
[ "$rc" = 2 ] && exit 0  # no Clang: said why
[ "$rc" = 0 ] || exit "$rc"

export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS=print_stacktrace=1
# OpenMPI keeps its components loaded: unloaded at exit, their frames would
# be "<unknown module>" to the suppressions.
export OMPI_MCA_mca_base_component_disable_dlclose=1
# In the MPI jobs, stacks are unwound fully at each allocation, not by frame
# pointers (which OpenMPI is built without), so that the suppressions see
# which library allocated; elsewhere that only costs time (a third more).
full_unwind=fast_unwind_on_malloc=0
start=$(date +%s)
set +e
if [ $# -gt 0 ]; then
  ASAN_OPTIONS=$full_unwind ctest --test-dir build-sanitize --output-on-failure -j 2 -R "$1" > build-sanitize/sanitize.log 2>&1
  rc=$?
else
  ctest --test-dir build-sanitize --output-on-failure -j 2 -E '^mpi:' > build-sanitize/sanitize.log 2>&1
  rc=$?
  ASAN_OPTIONS=$full_unwind ctest --test-dir build-sanitize --output-on-failure -j 2 -R '^mpi:' >> build-sanitize/sanitize.log 2>&1
  rc=$(( rc | $? ))
fi
set -e
# Totals over the runs, from CTest's own summary lines.
python3 - build-sanitize/sanitize.log "$(( $(date +%s) - start ))" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
runs = [tuple(map(int, m)) for m in re.findall(r"(\d+) tests failed out of (\d+)", text)]
failed, total = sum(r[0] for r in runs), sum(r[1] for r in runs)
skipped = len(re.findall(r"\(Skipped\)", text))
print(f"sanitize: {total - failed - skipped} tests passed, {failed} failed, {skipped} skipped, of {total}, "
      f"in {sys.argv[2]} s under ASan, LSan and UBSan")
PY
if [ "$rc" != 0 ]; then
  echo "sanitize: FAILED; the failing tests and the sanitizers' reports (all in build-sanitize/sanitize.log):"
  sed -n '/The following tests FAILED/,/Errors while running/p' build-sanitize/sanitize.log
  grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY:" build-sanitize/sanitize.log | sort | uniq -c | head -20
  exit 1
fi
