#!/usr/bin/env bash
# Uses Tessera as a user's project would: installs the built tree (build/ by
# default, or the build folder given as the first argument) into
# <build>/install, builds examples/ (predict, data_parallel, generate, model_test) against that
# installed package (find_package(Tessera), warnings as errors) in
# <build>/example, and runs them on
# configs/tiny_synthetic.yaml: predict twice, training and saving a checkpoint,
# then loading it, which must give the same predictions; generate on a GPT
# trained for a few steps, whose greedy text must be tessera generate's;
# data_parallel on cpu:2 in one process and, where mpirun exists, as a job of
# 2 processes, which must print the same losses; model_test, a user's doctest
# suite of a model of their own (<tessera/testing/doctest.hpp>), must pass.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prefix="$(cd "$build" && pwd)/install"

rm -rf "$prefix" "$build/example"
cmake --install "$build" --prefix "$prefix" > /dev/null
cmake -S examples -B "$build/example" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_COMPILE_WARNING_AS_ERROR=ON > /dev/null
cmake --build "$build/example"

checkpoint="$build/example/checkpoint"
"$build/example/predict" configs/tiny_synthetic.yaml "$checkpoint" | tee "$build/example/trained.txt"
"$build/example/predict" configs/tiny_synthetic.yaml "$checkpoint" | tee "$build/example/loaded.txt"
diff <(grep '^sample' "$build/example/trained.txt") <(grep '^sample' "$build/example/loaded.txt") \
  || { echo "example: predictions from the loaded checkpoint differ from the trained model's" >&2; exit 1; }
echo "example: the installed package builds and runs"

"$build/example/model_test"
echo "example: a user's doctest suite of their own model passes"

# A GPT of the zoo after a few steps on the README's bytes: the program's
# greedy text must be the command line's.
gpt="$build/example/gpt"
"$build/tessera" train scripts/gpu-check/gpt.yaml --set training.epochs=1 --set data.train.stride=1024 \
  --set training.checkpoint.dir="$gpt" > /dev/null
"$build/example/generate" scripts/gpu-check/gpt.yaml "$gpt" "Tessera is" 30 | tee "$build/example/generated.txt"
"$build/tessera" generate scripts/gpu-check/gpt.yaml --checkpoint "$gpt" --prompt "Tessera is" --temperature 0 \
  --max-new-tokens 30 2> /dev/null > "$build/example/cli.txt"
diff <(head -1 "$build/example/generated.txt") "$build/example/cli.txt" \
  || { echo "example: generate's greedy text differs from tessera generate's" >&2; exit 1; }
echo "example: generate streams the text tessera generate prints"

"$build/example/data_parallel" configs/tiny_synthetic.yaml 2 | tee "$build/example/one.txt"
if command -v mpirun > /dev/null; then
  # Plain copies in OpenMPI's shared-memory transport: CMA needs ptrace rights
  # that containers often lack.
  OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun -np 2 --oversubscribe $([ "$(id -u)" = 0 ] && echo --allow-run-as-root) \
    "$build/example/data_parallel" configs/tiny_synthetic.yaml 2 | tee "$build/example/two.txt"
  python3 - "$build/example/one.txt" "$build/example/two.txt" <<'PY' \
    || { echo "example: data_parallel as 2 processes does not give one process's losses" >&2; exit 1; }
import sys
one, two = ([float(l.split()[-1]) for l in open(p) if l.startswith("epoch")] for p in sys.argv[1:])
assert len(one) == len(two) == 3 and all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(one, two)), (one, two)
PY
  echo "example: data_parallel gives the same losses in one process and as a job of two"
fi
