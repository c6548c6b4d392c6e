#!/usr/bin/env bash
# Uses Tessera as a user's project would: installs the built tree (build/ by
# default, or the build folder given as the first argument) into
# <build>/install, builds examples/predict against that installed package
# (find_package(Tessera), warnings as errors) in <build>/example, and runs it on
# configs/tiny_synthetic.yaml twice: training and saving a checkpoint, then
# loading it, which must give the same predictions.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prefix="$(cd "$build" && pwd)/install"

rm -rf "$prefix" "$build/example"
cmake --install "$build" --prefix "$prefix" > /dev/null
cmake -S examples/predict -B "$build/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_COMPILE_WARNING_AS_ERROR=ON > /dev/null
cmake --build "$build/example"

checkpoint="$build/example/checkpoint"
"$build/example/predict" configs/tiny_synthetic.yaml "$checkpoint" | tee "$build/example/trained.txt"
"$build/example/predict" configs/tiny_synthetic.yaml "$checkpoint" | tee "$build/example/loaded.txt"
diff <(grep '^sample' "$build/example/trained.txt") <(grep '^sample' "$build/example/loaded.txt") \
  || { echo "example: predictions from the loaded checkpoint differ from the trained model's" >&2; exit 1; }
echo "example: the installed package builds and runs"
