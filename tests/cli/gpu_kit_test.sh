#!/usr/bin/env bash
# The GPU kit made from this build (no rebuild), then gpu-check.sh from it:
# the CPU half, a few test cases, the MLP's comparisons (f32, bf16, a 2x2 mesh) and the GPT's
# (f32, 20 steps), and both models' inference (the GPT's greedy text on one device and on a
# 1x4 mesh), with the CPU standing in for the GPU. Fails when either script breaks.
#   gpu_kit_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
source_dir=$1 build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$source_dir/scripts/gpu-kit.sh" --no-build --build-dir "$build_dir" --out "$work/kit"
TESSERA_GPU_KIT="$work/kit" TESSERA_GPU_CHECK_DEVICE=cpu TESSERA_GPU_CHECK_SUITE_ARGS="-tc=mixed?precision*" TESSERA_GPU_CHECK_EPOCHS=1 \
  TESSERA_GPU_CHECK_ZOO="mlp:f32:2 mlp:bf16:5 mlp:f32:2:mesh gpt:f32:2" TESSERA_GPU_CHECK_STEPS=20 OUT="$work" \
  "$source_dir/scripts/gpu-check.sh" --cpu-only
grep -q "^gpu-check: 8 passed, 0 failed, 5 skipped" "$work/gpu-check.txt"
