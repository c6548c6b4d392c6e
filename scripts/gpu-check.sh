#!/usr/bin/env bash
# Proves Tessera's GPU path on a GPU machine, from the kit that
# scripts/gpu-kit.sh made (gpu-kit/ at the repository root), with nothing to
# install: the machine needs CUDA 13's cuBLAS, cuBLASLt and NCCL (its toolkit,
# or PyTorch's wheels), and an NVIDIA driver.
#
#   scripts/gpu-check.sh             # every check
#   scripts/gpu-check.sh --cpu-only  # the CPU half: what a machine without a GPU can run
#   TESSERA_GPU_CHECK_DEVICE=cpu scripts/gpu-check.sh   # checks 4 and 5 on the CPU twice: a test of
#                                    # the check itself on a machine without a GPU
#   TESSERA_GPU_KIT=DIR              # the kit's folder (default gpu-kit/)
#   TESSERA_GPU_CHECK_SUITE_ARGS=... # doctest options for check 2 (-tc=... to run a few cases)
#   TESSERA_GPU_CHECK_EPOCHS=N       # check 4 trains N epochs instead of the configs' (a quick run)
#   TESSERA_GPU_CHECK_STEPS=N        # and at most N steps an epoch
#   TESSERA_GPU_CHECK_ZOO="mlp:f32:2 ..."   # check 4's cases: model:precision:tolerance in %[:mesh]
#   TESSERA_GPU_CHECK_CASE_LIMIT=S   # seconds one GPU test case may take (default 120)
#   TESSERA_GPU_CHECK_SANITIZE=1     # run a failed GPU test case again under compute-sanitizer
#   TESSERA_GPU_CHECK_BENCH_ARGS=... # options of bench_gpu for check 7 (--models gpt, --steps 5...)
#   TESSERA_GPU_CHECK_BENCH_LIMIT=S  # seconds check 7 may take (420)
#   TESSERA_GPU_CHECK_RUN_LIMIT=S    # seconds one run of checks 4 and 5, or check 6, may take (300)
#   TESSERA_GPU_CHECK_ONLY="3 7"     # only these checks (1, the devices, always runs): a quick rerun
#   TESSERA_GPU_CHECK_GPU_CASES=...  # check 3's cases whose names match this doctest filter ('*attention*')
#   TESSERA_CUDA_FLASH_FORWARD=mma   # every check with the flash attention kernels not yet proven on
#   TESSERA_CUDA_FLASH_BACKWARD=mma  # a GPU, of the forward or backward pass (backends/cuda/flash_attention.hpp)
#   TESSERA_CUDA_MATMUL_EPILOGUE=cublaslt   # or with cuBLASLt's bias epilogue (backends/cuda/lt_matmul.hpp)
#   TESSERA_GPU_CHECK_PROFILE="gpt_125m:bf16 ..."   # also check 8: those models' training
#                                    # (scripts/gpu-check/MODEL.yaml) op by op on cuda:0, each op's
#                                    # GPU time read from CUDA events recorded around it
#
# The checks, in order (each passes, fails or is skipped, saying why):
#   1. devices      the devices the kit's tessera sees, and which libraries it loaded
#   2. cpu suite    the CPU test suite (tessera_tests)
#   3. gpu suite    every GPU test case and the op harness on cuda:0 (tessera_tests --gpu-suite)
#   4. zoo on cuda  the zoo's MLP, CNN and GPT trained for about 300 steps on cuda:0 and on
#                   the CPU from the same seed (scripts/gpu-check/*.yaml: synthetic images and
#                   the README's bytes, since the GPU machine has no datasets): each epoch's
#                   mean loss on cuda:0 within 2% of the CPU's (or 0.001, near zero); and
#                   the GPT in bf16 mixed precision on cuda:0 within 5% of the CPU's f32;
#                   the MLP and GPT on a 2x2 AutoTP mesh of cuda:0x4 (four logical devices
#                   of GPU 0, the config's distribution: section) against one CPU device
#   5. inference    each f32 model check 4 trained on one device, run from its checkpoint on
#                   cuda:0 and on the CPU: eval's loss within 0.5% (or 0.001); predict's
#                   outputs within 1e-3 (MLP, CNN); generate's greedy text the same (GPT), on
#                   cuda:0 and tensor-parallel on a 1x4 mesh of cuda:0x4
#   6. sharding     the sharding tests' matrix (MLP, CNN, GPT on 8 meshes x 3 layouts, ZeRO,
#                   AutoTP) on logical devices of GPU 0 against cuda:0 alone
#                   (TESSERA_TEST_MESH_DEVICES=cuda, tests/mesh_devices.hpp)
#   7. benchmarks   bench_gpu: matmul TFLOP/s and the GPT's and gpt_125m's train and infer
#                   steps in f32 and bf16 against PyTorch eager on the same GPU (python3)
#   8. profiles     optional (TESSERA_GPU_CHECK_PROFILE): a model's training op by op on cuda:0
#   9. unproven     kernels not yet the default (TESSERA_CUDA_FLASH_FORWARD=mma, _BACKWARD=mma,
#                   TESSERA_CUDA_MATMUL_EPILOGUE=cublaslt): the attention and matmul test cases and
#                   the op table, and gpt_125m's bf16 steps in bench_gpu
# Everything printed also goes to gpu-check.txt in $OUT (the device tool's folder) or here.
# Exit status: 0 when nothing failed. Under 10 minutes on the GPU machine (16 cores).
set -uo pipefail
cd "$(dirname "$0")/.."
top=$(pwd)
kit=${TESSERA_GPU_KIT:-$top/gpu-kit}
cpu_only=0
device=${TESSERA_GPU_CHECK_DEVICE:-cuda:0}
case ${1:-} in
  "") ;;
  --cpu-only) cpu_only=1 ;;
  *) echo "gpu-check: unknown option '$1' (--cpu-only, or none)" >&2; exit 2 ;;
esac
results=${OUT:-$top}/gpu-check.txt
exec > >(tee "$results") 2>&1

# The kit's big files travel gzipped (gpu-kit.sh): unpacked once, in place.
for packed in "$kit"/bin/*.gz "$kit"/lib/*.gz; do
  [ -e "$packed" ] && gzip -df "$packed"
done
[ -x "$kit/bin/tessera" ] || { echo "gpu-check: no kit in $kit: run scripts/gpu-kit.sh on a machine with the CUDA toolkit and Tessera's build dependencies first"; exit 2; }
kit_commit=$(awk '/^commit: / {print $2}' "$kit/MANIFEST")
echo "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC'), kit of $kit_commit, $(nproc) CPUs, flash attention kernels: ${TESSERA_CUDA_FLASH_FORWARD:-wmma} forward, ${TESSERA_CUDA_FLASH_BACKWARD:-wmma} backward, matmul epilogue: ${TESSERA_CUDA_MATMUL_EPILOGUE:-pass}"
tree_commit=$(git rev-parse --short HEAD 2>/dev/null || true)
[ -z "$tree_commit" ] || [ "$tree_commit" = "$kit_commit" ] ||
  echo "gpu-check: WARNING: the kit was built at $kit_commit and the tree is at $tree_commit: scripts/gpu-kit.sh rebuilds it"

# Where the GPU machine keeps CUDA's libraries: the toolkit, then the wheels
# PyTorch installs (site-packages/nvidia/*/lib).
cuda_dirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib; do
  [ -d "$d" ] && cuda_dirs+=("$d")
done
if command -v python3 >/dev/null; then
  while read -r d; do cuda_dirs+=("$d"); done < <(python3 -c '
import glob, os, site
for p in site.getsitepackages():
    for d in sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib"))): print(d)' 2>/dev/null)
fi
# A stub stands in only for a library found nowhere, so it never shadows the real one.
fallback=$(mktemp -d)
trap 'rm -rf "$fallback"' EXIT
for stub in "$kit"/stubs/*; do
  name=$(basename "$stub") found=no
  for d in "${cuda_dirs[@]}"; do [ -e "$d/$name" ] && found=yes; done
  ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$name " && found=yes
  [ $found = yes ] || ln -s "$stub" "$fallback/$name"
done
export LD_LIBRARY_PATH="$(IFS=:; echo "${cuda_dirs[*]}"):$kit/lib:$fallback${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The tests read the source tree at the path the kit was built from.
built_at=$(awk '/^source: / {print $2}' "$kit/MANIFEST")
if [ -n "$built_at" ] && [ "$built_at" != "$top" ] && [ ! -e "$built_at" ]; then
  mkdir -p "$(dirname "$built_at")" && ln -s "$top" "$built_at" &&
    echo "gpu-check: the tests read $built_at (where the kit was built): linked to $top"
fi

# Runs a command under a time limit, as timeout(1) does (exit 124 past it),
# but first prints where its threads are, with cuda-gdb (the GPU machine has
# it) or gdb: a hang and a slow run then read differently.
limited() {
  local deadline=$((EPOCHSECONDS + $1)) limit=$1 pid
  shift
  "$@" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$EPOCHSECONDS" -ge "$deadline" ]; then
      echo "gpu-check: '$(basename "$1")' ran past its $limit s: its threads' stacks, then it is stopped"
      local debugger
      debugger=$(command -v cuda-gdb || command -v gdb || true)
      if [ -n "$debugger" ]; then
        timeout 90 "$debugger" -p "$pid" -batch -ex "info threads" -ex "thread apply all bt 16" 2>&1 |
          grep -E '^(Thread|#|\*? +[0-9]+ +Thread)' | head -200 | sed 's/^/    /'
      fi
      kill -TERM "$pid" 2>/dev/null
      sleep 2
      kill -KILL "$pid" 2>/dev/null
      wait "$pid"
      return 124
    fi
    sleep 0.1  # a GPU test case takes about 0.4 s: a coarser poll would add to each
  done
  wait "$pid"
}

passed=() failed=() skipped=() trained=()
only=" ${TESSERA_GPU_CHECK_ONLY:-2 3 4 5 6 7 8 9} "
for check in $only; do
  [[ $check =~ ^[2-9]$ ]] ||
    { echo "gpu-check: TESSERA_GPU_CHECK_ONLY takes check numbers 2 to 9 apart by spaces, not '$check'"; exit 2; }
done
wanted() { [[ $only == *" $1 "* ]]; }
pass() { passed+=("$1"); echo "gpu-check: PASS $1"; }
fail() { failed+=("$1"); echo "gpu-check: FAIL $1${2:+: $2}"; }
skip() { skipped+=("$1"); echo "gpu-check: SKIP $1: $2"; }
section() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }
tessera=$kit/bin/tessera tests=$kit/bin/tessera_tests

section "1. devices"
if devices=$("$tessera" devices 2>&1); then
  echo "$devices"
  ldd "$tests" | grep -E 'libcudart|libcublas|libnccl|libdnnl' | sed 's/^[[:space:]]*/  loads /' |
    sed "s|=> $fallback/[^ ]*|=> the kit's stub (no real one found)|"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  pass "devices"
else
  echo "$devices"
  fail "devices" "the kit's tessera does not start (a library missing above?)"
fi
has_gpu=0
grep -q '^cuda:0' <<<"$devices" && has_gpu=1
why_no_gpu="no GPU here (tessera devices lists no cuda:0)"
[ $cpu_only -eq 1 ] && why_no_gpu="--cpu-only"
[ $cpu_only -eq 1 ] && has_gpu=0

section "2. cpu suite"
if wanted 2; then
# Two test cases read what the kit cannot carry: the Fashion-MNIST package's
# files, and python3 (an independent safetensors reader).
excluded=()
[ -d /usr/share/datasets/fashion-mnist ] || excluded+=("*real Fashion-MNIST*")
command -v python3 >/dev/null || excluded+=("*reads in Python*")
for e in "${excluded[@]}"; do echo "  left out, for want of its data or python3: $e"; done
read -ra suite_args <<<"${TESSERA_GPU_CHECK_SUITE_ARGS:-}"
if "$tests" --no-intro --minimal ${excluded:+"--test-case-exclude=$(IFS=,; echo "${excluded[*]}")"} "${suite_args[@]}"; then
  pass "cpu suite"
else
  fail "cpu suite"
fi

else
  skip "cpu suite" "not in TESSERA_GPU_CHECK_ONLY"
fi

# Runs the GPU test cases whose names match doctest filter $1 (all where
# empty), each in its own process; sets gpu_cases and bad_cases.
run_gpu_cases() {
  mapfile -t gpu_cases < <("$tests" --gpu-suite --list-test-cases --no-intro --reporters=console \
    ${1:+"--test-case=$1"} 2>/dev/null |
    grep -vE '^(=+|\[doctest\].*)$' | sed '/^$/d')
  echo "  ${#gpu_cases[@]} GPU test cases"
  bad_cases=()
  for c in "${gpu_cases[@]}"; do
    start=$EPOCHREALTIME
    if limited "${TESSERA_GPU_CHECK_CASE_LIMIT:-120}" "$tests" --gpu-suite --no-intro --minimal "--test-case=${c//,/*}" >"$fallback/case.log" 2>&1; then
      status=ok
    else
      rc=$?
      status="FAILED (exit $rc$([ $rc -eq 124 ] && echo ', over the time limit'))"
      bad_cases+=("$c")
    fi
    printf '  %-8s %6.1f s  %s\n' "${status%% *}" "$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN {print b - a}')" "$c"
    [ "$status" = ok ] || sed 's/^/      /' "$fallback/case.log" | tail -40
    if [ "$status" != ok ] && [ -n "${TESSERA_GPU_CHECK_SANITIZE:-}" ] && command -v compute-sanitizer >/dev/null; then
      echo "      --- again under compute-sanitizer (memcheck):"
      timeout 120 compute-sanitizer --tool memcheck --print-limit 5 "$tests" --gpu-suite --no-intro --minimal "--test-case=${c//,/*}" 2>&1 |
        grep -vE '^\s*$' | head -60 | sed 's/^/      /'
    fi
  done
}

section "3. gpu suite"
if wanted 3; then
# Each case in its own process, under a time limit: a sticky CUDA error (an
# illegal address poisons the context) or a hang then costs one case, not the
# rest of the suite. A ',' in a name would split doctest's filter: '*' stands in.
if [ $has_gpu -eq 1 ]; then
  run_gpu_cases "${TESSERA_GPU_CHECK_GPU_CASES:-}"
  if [ ${#gpu_cases[@]} -gt 0 ] && [ ${#bad_cases[@]} -eq 0 ]; then
    pass "gpu suite (${#gpu_cases[@]} cases)"
  else
    fail "gpu suite" "${#bad_cases[@]} of ${#gpu_cases[@]} cases failed"
  fi
else
  skip "gpu suite" "$why_no_gpu"
fi

else
  skip "gpu suite" "not in TESSERA_GPU_CHECK_ONLY"
fi

section "4. zoo on $device against the CPU"
if wanted 4; then
# Each epoch's loss from a --log file of JSON lines, one per line.
losses() { grep -oE '"loss": *[-0-9.eE+]+' "$1" | grep -oE '[-0-9.eE+]+$'; }
# Each case: the model, its precision on the checked device (the CPU runs
# f32), and the tolerance on each epoch's loss (bf16: mixed_precision_test's).
# A mesh case: four logical devices of the checked device's GPU (cpu:4 when it is the CPU).
mesh_devices=cuda:${device#cuda:}x4
[ "$device" = cpu ] && mesh_devices=cpu:4
for case in ${TESSERA_GPU_CHECK_ZOO:-mlp:f32:2 cnn:f32:2 gpt:f32:2 gpt:bf16:5 mlp:f32:2:mesh gpt:f32:2:mesh}; do
  IFS=: read -r model precision tolerance mesh <<<"$case"
  checked=$device where=(--device "$device")
  if [ "${mesh:-}" = mesh ]; then
    checked="a 2x2 mesh of $mesh_devices"
    where=(--set "distribution={devices: '$mesh_devices', mesh: {shape: [2, 2], axis_names: [batch, model]}, type: auto_tp}")
  fi
  name="zoo $model on $checked"
  [ "$precision" = f32 ] || name+=" in $precision"
  if [ "$device" != cpu ] && [ $has_gpu -eq 0 ]; then skip "$name" "$why_no_gpu"; continue; fi
  config=scripts/gpu-check/$model.yaml work=$(mktemp -d)
  ok=1
  for role in reference checked; do
    on=(--device cpu) label=cpu dtype=f32
    [ $role = checked ] && on=("${where[@]}") label=$checked dtype=$precision
    echo "--- $model on $label in $dtype"
    limited "${TESSERA_GPU_CHECK_RUN_LIMIT:-300}" "$tessera" train "$config" "${on[@]}" --log "$work/$role.jsonl" \
      --set training.checkpoint.dir="$work/$role" --set training.precision="$dtype" \
      ${TESSERA_GPU_CHECK_EPOCHS:+--set training.epochs="$TESSERA_GPU_CHECK_EPOCHS"} \
      ${TESSERA_GPU_CHECK_STEPS:+--set training.steps_per_epoch="$TESSERA_GPU_CHECK_STEPS"} || ok=0
  done
  if [ $ok -eq 0 ]; then
    fail "$name" "a run failed"
  elif ! paste <(losses "$work/reference.jsonl") <(losses "$work/checked.jsonl") |
    awk -v device="$device" -v tolerance="$tolerance" '{d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
          printf "  epoch %d: loss %s on the CPU, %s on %s (%.3f%% apart)\n", NR, $1, $2, device, 100 * r;
          if ((100 * r > tolerance && d > 1e-3) || $2 == "") bad = 1} END {exit bad || NR == 0}'; then
    fail "$name" "losses more than $tolerance% (and 0.001) apart"
  else
    pass "$name"
    # Check 5 runs the weights trained on the checked device.
    if [ -z "${mesh:-}" ] && [ "$precision" = f32 ] && [ -d "$work/checked" ]; then
      mv "$work/checked" "$fallback/trained_$model" && trained+=("$model")
    fi
  fi
  rm -rf "$work"
done

else
  skip "zoo" "not in TESSERA_GPU_CHECK_ONLY"
fi

section "5. inference on $device against the CPU"
if wanted 5; then
# The weights check 4 trained on the checked device, run on it and on the
# CPU: the same weights, so only rounding may differ.
# The last "loss" figure of an eval's output.
eval_loss() { grep -oE '\): loss -?[0-9.]+' "$1" | tail -1 | grep -oE -- '-?[0-9.]+$'; }
# Inputs for predict: SAMPLES random values of the model's input shape, in .npy.
write_npy() {
  python3 - "$@" <<'PY'
import random, struct, sys
path, shape = sys.argv[1], [int(d) for d in sys.argv[2].split(",")]
n = 1
for d in shape: n *= d
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}, " for d in shape)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
random.seed(7)
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack(f"<{n}f", *[random.random() for _ in range(n)]))
PY
}
if [ ${#trained[@]} -eq 0 ]; then
  skip "inference" "check 4 trained no f32 model on one device (or did not run)"
fi
for model in "${trained[@]}"; do
  name="inference of zoo $model on $device"
  if [ "$device" != cpu ] && [ $has_gpu -eq 0 ]; then skip "$name" "$why_no_gpu"; continue; fi
  config=scripts/gpu-check/$model.yaml ckpt=$fallback/trained_$model work=$(mktemp -d) why=""
  fewer=()
  [ "$model" = gpt ] && fewer=(--set data.train.stride=128)  # eval: a window every 128 bytes, not 16
  for side in cpu checked; do
    on=(--device cpu)
    [ $side = checked ] && on=(--device "$device")
    limited "${TESSERA_GPU_CHECK_RUN_LIMIT:-300}" "$tessera" eval "$config" --checkpoint "$ckpt" "${on[@]}" --split train "${fewer[@]}" \
      > "$work/eval_$side.out" 2>&1 || why+="eval on $side failed; "
    if [ "$model" = gpt ]; then
      limited "${TESSERA_GPU_CHECK_RUN_LIMIT:-300}" "$tessera" generate "$config" --checkpoint "$ckpt" "${on[@]}" \
        --prompt "Tessera trains" --prompt "The mesh" --max-new-tokens 48 --temperature 0 \
        > "$work/generate_$side.out" 2> "$work/generate_$side.err" || why+="generate on $side failed; "
    elif command -v python3 >/dev/null; then
      shape=64,784
      [ "$model" = cnn ] && shape=64,28,28,1
      [ -e "$work/inputs.npy" ] || write_npy "$work/inputs.npy" "$shape"
      limited "${TESSERA_GPU_CHECK_RUN_LIMIT:-300}" "$tessera" predict "$config" --checkpoint "$ckpt" "${on[@]}" \
        --input "$work/inputs.npy" --output "$work/predict_$side.csv" > /dev/null 2>&1 || why+="predict on $side failed; "
    fi
  done
  a=$(eval_loss "$work/eval_cpu.out") b=$(eval_loss "$work/eval_checked.out")
  echo "  eval: loss $a on the CPU, $b on $device"
  awk -v a="${a:-x}" -v b="${b:-y}" 'BEGIN {d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a;
      exit !(a != "x" && b != "y" && (d <= 0.001 || d <= 0.005 * m))}' || why+="eval losses apart; "
  if [ "$model" = gpt ] && [ -s "$work/generate_cpu.out" ]; then
    sed 's/^/  the CPU: /' "$work/generate_cpu.out"
    sed "s/^/  $device: /" "$work/generate_checked.out"
    cmp -s "$work/generate_cpu.out" "$work/generate_checked.out" || why+="greedy text differs; "
    # Tensor-parallel decoding (heads and the KV cache split) on four logical devices.
    limited "${TESSERA_GPU_CHECK_RUN_LIMIT:-300}" "$tessera" generate "$config" --checkpoint "$ckpt" \
      --set "distribution={devices: '$mesh_devices', mesh: {shape: [1, 4], axis_names: [batch, model]}, type: auto_tp}" \
      --prompt "Tessera trains" --prompt "The mesh" --max-new-tokens 48 --temperature 0 \
      > "$work/generate_mesh.out" 2> "$work/generate_mesh.err" || why+="generate on a 1x4 mesh of $mesh_devices failed; "
    sed "s/^/  1x4 $mesh_devices: /" "$work/generate_mesh.out"
    cmp -s "$work/generate_cpu.out" "$work/generate_mesh.out" || why+="greedy text on the mesh differs; "
  elif [ -s "$work/predict_cpu.csv" ]; then
    # Largest difference of the outputs, relative to 1 + |the CPU's value|.
    worst=$(paste -d, "$work/predict_cpu.csv" "$work/predict_checked.csv" | awk -F, '{h = NF / 2;
        for (i = 1; i <= h; i++) if ($i ~ /^-?[0-9]/) { d = $i - $(i + h); if (d < 0) d = -d; m = $i < 0 ? -$i : $i;
          r = d / (1 + m); if (r > w) w = r }} END {printf "%.3g", w + 0}')
    echo "  predict: 64 inputs, outputs at most $worst apart (relative to 1 + |value|)"
    awk -v w="$worst" 'BEGIN {exit !(w <= 1e-3)}' || why+="predicted outputs apart; "
  fi
  if [ -z "$why" ]; then pass "$name"; else fail "$name" "${why%; }"; fi
  rm -rf "$work"
done

else
  skip "inference" "not in TESSERA_GPU_CHECK_ONLY"
fi

section "6. sharding on logical devices of GPU 0"
if wanted 6; then
if [ $has_gpu -eq 1 ]; then
  # --duration: each case's time, so a slow case and a stuck one read differently.
  if TESSERA_TEST_MESH_DEVICES=cuda limited "${TESSERA_GPU_CHECK_RUN_LIMIT:-300}" "$tests" --no-intro --duration=true \
    --test-case="sharded training equals one device*,AutoTP trains*,zero 1*,data parallel dropout*"; then
    pass "sharding matrix on cuda:0x8"
  else
    fail "sharding matrix on cuda:0x8"
  fi
else
  skip "sharding matrix on cuda:0x8" "$why_no_gpu"
fi

else
  skip "sharding matrix" "not in TESSERA_GPU_CHECK_ONLY"
fi

section "7. benchmarks against PyTorch on the same GPU"
if wanted 7; then
# Matmul TFLOP/s against the measured peaks; GPT and gpt_125m steps, train and
# infer, f32 and bf16, against PyTorch eager (bench/torch_gpu.py, python3).
if [ $has_gpu -eq 0 ]; then
  skip "benchmarks" "$why_no_gpu"
elif ! command -v python3 >/dev/null || ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  skip "benchmarks" "no python3 with a CUDA PyTorch here (the peer)"
elif [ ! -x "$kit/bin/bench_gpu" ]; then
  skip "benchmarks" "the kit has no bench_gpu (made before it existed)"
elif limited "${TESSERA_GPU_CHECK_BENCH_LIMIT:-420}" "$kit/bin/bench_gpu" --python "$(command -v python3)" ${TESSERA_GPU_CHECK_BENCH_ARGS:-}; then
  pass "benchmarks (figures above)"
else
  fail "benchmarks" "bench_gpu failed or ran past its time limit"
fi

else
  skip "benchmarks" "not in TESSERA_GPU_CHECK_ONLY"
fi

section "8. op profiles on $device"
if wanted 8; then
# Optional: where a training step's time goes, op by op (tessera train --profile).
if [ -z "${TESSERA_GPU_CHECK_PROFILE:-}" ]; then
  skip "op profiles" "TESSERA_GPU_CHECK_PROFILE names no model"
elif [ $has_gpu -eq 0 ]; then
  skip "op profiles" "$why_no_gpu"
else
  for case in $TESSERA_GPU_CHECK_PROFILE; do
    IFS=: read -r model precision <<<"$case"
    echo "--- $model in ${precision:=f32} on $device"
    if limited "${TESSERA_GPU_CHECK_RUN_LIMIT:-300}" "$tessera" train "scripts/gpu-check/$model.yaml" \
      --device "$device" --set training.precision="$precision" --set training.checkpoint.dir="$fallback/profile" --profile; then
      pass "op profile of $model in $precision"
    else
      fail "op profile of $model in $precision"
    fi
  done
fi

else
  skip "op profiles" "not in TESSERA_GPU_CHECK_ONLY"
fi

section "9. kernels not yet the default (taken only when asked, until proven here)"
if wanted 9; then
# Flash attention's mma kernels (backends/cuda/flash_attention_mma.cu,
# _backward_mma.cu) and cuBLASLt's bias and ReLU epilogue (lt_matmul.hpp):
# the attention and matmul cases and the op table against the CPU (one of
# them a bf16 training step of the zoo GPT), then gpt_125m's bf16 steps in
# bench_gpu, beside check 7's with the default kernels.
if [ $has_gpu -eq 0 ]; then
  skip "unproven kernels" "$why_no_gpu"
else
  export TESSERA_CUDA_FLASH_FORWARD=mma TESSERA_CUDA_FLASH_BACKWARD=mma TESSERA_CUDA_MATMUL_EPILOGUE=cublaslt
  run_gpu_cases '*attention*,*matmul*,*op table*'
  if [ ${#gpu_cases[@]} -gt 0 ] && [ ${#bad_cases[@]} -eq 0 ]; then
    pass "unproven kernels: ${#gpu_cases[@]} cases"
  else
    fail "unproven kernels" "${#bad_cases[@]} of ${#gpu_cases[@]} cases failed"
  fi
  if ! command -v python3 >/dev/null || [ ! -x "$kit/bin/bench_gpu" ]; then
    skip "unproven kernels: benchmark" "no python3 or no bench_gpu in the kit"
  elif limited "${TESSERA_GPU_CHECK_BENCH_LIMIT:-420}" "$kit/bin/bench_gpu" --python "$(command -v python3)" \
    --models gpt_125m --precisions bf16 --matmul-sizes 1024 --steps 10 --warmup 3; then
    pass "unproven kernels: benchmark (figures above)"
  else
    fail "unproven kernels: benchmark" "bench_gpu failed or ran past its time limit"
  fi
  unset TESSERA_CUDA_FLASH_FORWARD TESSERA_CUDA_FLASH_BACKWARD TESSERA_CUDA_MATMUL_EPILOGUE
fi

else
  skip "unproven kernels" "not in TESSERA_GPU_CHECK_ONLY"
fi

section "summary"
echo "gpu-check: ${#passed[@]} passed, ${#failed[@]} failed, ${#skipped[@]} skipped; the whole output is in $results"
for f in "${failed[@]}"; do echo "  failed: $f"; done
[ ${#failed[@]} -eq 0 ]
