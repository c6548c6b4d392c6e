#!/usr/bin/env bash
# scripts/check-floors.sh passes on this tree, and fails on a tree with a
# planted upward include, a foreign detail.hpp, a file of no floor, or a stale
# entry in the list of known upward includes.
#   floors_test.sh SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
src=$1
check=$src/scripts/check-floors.sh

out=$("$check") || fail "check-floors fails on the source tree: $out"
grep -q ": ok$" <<<"$out" || fail "unexpected summary: $out"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A tree of two floors' files with the project's floors.
plant() {  # plant: a fresh tree in $work/t with a valid core -> backends pair
  rm -rf "$work/t"
  mkdir -p "$work/t/scripts" "$work/t/engine/core" "$work/t/engine/data" "$work/t/engine/checkpoint" "$work/t/backends"
  cp "$src/scripts/floors.txt" "$work/t/scripts/"
  printf '# none\n' > "$work/t/scripts/floors-known.txt"
  printf '#pragma once\n' > "$work/t/engine/core/tensor.hpp"
  printf '#include "engine/core/tensor.hpp"\n' > "$work/t/backends/backend.hpp"
}
plant
"$check" --root "$work/t" >/dev/null || fail "a downward include was refused"

plant
printf '#include "backends/backend.hpp"\n' >> "$work/t/engine/core/tensor.hpp"
expect_fail 1 "engine/core/tensor.hpp includes backends/backend.hpp: floor 1 (core) includes floor 2 (backends)" -- \
  "$check" --root "$work/t"

plant
printf '#pragma once\n' > "$work/t/engine/data/detail.hpp"
printf '#include "engine/data/detail.hpp"\n' > "$work/t/engine/checkpoint/checkpoint.cpp"
expect_fail 1 "engine/data's detail.hpp is private to its folder" -- "$check" --root "$work/t"

plant
mkdir -p "$work/t/engine/newfolder"
printf '#pragma once\n' > "$work/t/engine/newfolder/x.hpp"
expect_fail 1 "engine/newfolder/x.hpp belongs to no floor" -- "$check" --root "$work/t"

plant
printf 'engine/core/tensor.hpp -> backends/backend.hpp\n' >> "$work/t/scripts/floors-known.txt"
expect_fail 1 "no longer breaks a floor: delete the line" -- "$check" --root "$work/t"

# A known upward include is tolerated (and counted).
printf '#include "backends/backend.hpp"\n' >> "$work/t/engine/core/tensor.hpp"
out=$("$check" --root "$work/t") || fail "a known upward include was refused: $out"
grep -q "1 known upward includes" <<<"$out" || fail "the known include was not counted: $out"
echo "floors: ok"
