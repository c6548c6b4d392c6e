#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with Clang, AddressSanitizer
# (with LeakSanitizer) and UBSan into build-sanitize/ (scripts/sanitizer-build.sh), makes their seed corpora
# (the repository's configs and zoo models; small safetensors, npy and npz
# files written here; a real checkpoint's model file), and runs each target
# for SECONDS (default 60), one per core at a time. Prints each target's executions and coverage;
# exits 1 when an input crashes, leaks or trips UBSan (kept in
# build-sanitize/crashes/). Without Clang and libFuzzer it says so and exits 0.
#   scripts/fuzz.sh [SECONDS] [TARGET...]   targets: run_config safetensors npy checkpoint
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(run_config safetensors npy checkpoint)

set +e
scripts/sanitizer-build.sh "${targets[@]/#/fuzz_}"
rc=$?
set -e
[ "$rc" = 2 ] && exit 0  # no Clang: said why
[ "$rc" = 0 ] || exit "$rc"

corpus=build-sanitize/corpus
mkdir -p "$corpus"/{run_config,safetensors,npy,checkpoint} build-sanitize/crashes
cp configs/*.yaml models/*.yaml "$corpus/run_config/"
python3 - "$corpus" <<'PY'
import io, json, struct, sys, zipfile
corpus = sys.argv[1]

def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data

def npy(fmt, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (fmt, "".join(f"{d}, " for d in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    code = {"<f4": "f", "<i4": "i", "<i8": "q"}[fmt]
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack(f"<{len(values)}{code}", *values)

f32 = struct.pack("<6f", *[0.5 * i for i in range(6)])
files = {
    "safetensors/f32.safetensors": safetensors({"w": ("F32", [2, 3], f32)}, {"format": "pt"}),
    "safetensors/mixed.safetensors": safetensors({"a": ("I64", [2], struct.pack("<2q", 1, -2)),
                                                  "b": ("BF16", [2], struct.pack("<2H", 0x3f80, 0x4000)),
                                                  "c": ("I32", [0, 4], b""), "s": ("F32", [], struct.pack("<f", 3.5))}),
    "npy/f32.npy": npy("<f4", [3, 2], [0.5 * i for i in range(6)]),
    "npy/i64.npy": npy("<i8", [4], [1, 2, 3, 4]),
}
for method, name in ((zipfile.ZIP_STORED, "stored"), (zipfile.ZIP_DEFLATED, "deflated")):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as z:
        z.writestr("x.npy", npy("<f4", [3, 2], [0.5 * i for i in range(6)]))
        z.writestr("y.npy", npy("<i4", [3], [0, 1, 2]))
    files[f"npy/{name}.npz"] = buffer.getvalue()
for path, data in files.items():
    open(f"{corpus}/{path}", "wb").write(data)
PY
# The checkpoint target seeds itself with a real checkpoint's model file;
# only when it was asked for (and so built).
if [[ " ${targets[*]} " == *" checkpoint "* ]]; then
  cp "$corpus"/safetensors/* "$corpus/checkpoint/"
  TESSERA_FUZZ_SEED="$corpus/checkpoint" build-sanitize/tests/fuzz/fuzz_checkpoint -runs=0 "$corpus/checkpoint" > /dev/null 2>&1
fi

# The targets run side by side, one per core: each still gets SECONDS.
fuzz_one() {
  local target=$1 rc=0
  build-sanitize/tests/fuzz/fuzz_"$target" "$corpus/$target" -max_total_time="$seconds" -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="build-sanitize/crashes/$target-" > "build-sanitize/fuzz_$target.log" 2>&1 || rc=$?
  echo "$rc" > "build-sanitize/fuzz_$target.rc"
}
cores=$(nproc 2>/dev/null || echo 1)
running=0
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$cores" ]; then wait -n || true; running=$((running - 1)); fi
done
wait

failed=0
for target in "${targets[@]}"; do
  log=build-sanitize/fuzz_$target.log
  rc=$(cat "build-sanitize/fuzz_$target.rc")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
  if [ "$rc" = 0 ]; then
    echo "fuzz: $target: ${runs:-?} inputs in ${seconds} s, ${cov:-no coverage line}, no crash"
  else
    failed=1
    echo "fuzz: $target: FAILED after ${runs:-?} inputs (exit $rc); the input is in build-sanitize/crashes/, the log says:"
    grep -E "ERROR|SUMMARY|#[0-9]+ 0x" "$log" | head -20
  fi
done
exit "$failed"
