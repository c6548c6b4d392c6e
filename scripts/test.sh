#!/usr/bin/env bash
# The whole test suite from a fresh clone: install dependencies, build, run every
# doctest case through CTest. GPU tests report "skipped" where no GPU is found.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j 2
# ctest shows nothing of a skipped test: say why each one skipped.
grep -h "^skipped: " build/Testing/Temporary/LastTest.log 2>/dev/null | sort -u | sed 's/^/ctest: /' || true
scripts/example.sh  # the installed package, used as a user project would (examples/)
