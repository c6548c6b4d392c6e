#!/usr/bin/env bash
# Jobs of several processes, end to end: `mpirun -np N tessera train` gives the
# single-process run of the same mesh (losses and weights), a checkpoint saved
# sharded by 2 processes on mesh 2x2 loads on 1x4 and on one device with the
# same predictions, a job one of whose processes gets SIGTERM stops and
# resumes where it stopped, a killed process ends the job with an error naming it,
# and bad placements are config errors.
# Usage: mpi_test.sh TESSERA_BINARY SOURCE_DIR MPIRUN [MPIRUN_ARGS...]
set -euo pipefail
tessera=$1
src=$2
shift 2
mpirun=("$@" --oversubscribe --allow-run-as-root)
work=$(mktemp -d)
cd "$work"  # a run without a checkpoint folder saves under ./runs: here, not in the build tree
source "$(dirname "$0")/lib.sh"
watchdog "${TESSERA_TEST_WATCHDOG_S:-240}"  # ctest's timeout is 300 s
job=""  # a job in the background, which a failed check must not leave running
trap 'kill "$watchdog_pid" ${job:+"$job"} 2>/dev/null || true; rm -rf "$work"' EXIT

# 96 samples in batches of 32: three optimizer steps.
cp "$src/configs/tiny_synthetic.yaml" "$work/run.yaml"
three_steps=(--set training.epochs=1 --set data.train.samples=96)

stage "single-device references"
# The single-device runs every sharded run must equal, for both step settings.
for ref in "single 32 96" "single24 24 72"; do
  set -- $ref
  "$tessera" train "$work/run.yaml" --set training.epochs=1 --set data.train.samples="$3" --set training.batch_size="$2" \
    --set training.checkpoint.dir="$work/$1" --log "$work/$1.jsonl" > /dev/null
  "$tessera" export "$work/$1" "$work/$1.safetensors" > /dev/null
done

# Training: N processes equal one process holding the whole mesh, and one device. On 3x2
# with 2 processes both hold rows of the middle batch block (batches of 24):
# its metrics must still count once.
for run in "4x1 data_parallel 2" "4x1 data_parallel 4" "2x2 model_parallel 2" "2x2 model_parallel 4" \
           "1x4 model_parallel 2" "3x2 model_parallel 2"; do
  set -- $run
  name="$1-$2-np$3"
  stage "train $name"
  steps=("${three_steps[@]}")
  [ "$1" = 3x2 ] && steps=(--set training.epochs=1 --set data.train.samples=72 --set training.batch_size=24)
  "$tessera" train "$work/run.yaml" "${steps[@]}" --set "$(mesh "$1" "$2")" \
    --set training.checkpoint.dir="$work/$name.one" --log "$work/$name.one.jsonl" > /dev/null
  "${mpirun[@]}" -np "$3" "$tessera" train "$work/run.yaml" "${steps[@]}" --set "$(mesh "$1" "$2")" \
    --set training.checkpoint.dir="$work/$name.mpi" --log "$work/$name.mpi.jsonl" > "$work/$name.out"
  [ "$(wc -l < "$work/$name.mpi.jsonl")" = 1 ] || fail "$name: expected one log line (process 0 logs), got $(cat "$work/$name.mpi.jsonl")"
  [ "$(grep -c "^Training" "$work/$name.out")" = 1 ] || fail "$name: expected process 0 alone to print: $(cat "$work/$name.out")"
  [ -f "$work/$name.mpi/model.safetensors.index.json" ] || fail "$name: the checkpoint is not sharded"
  same_losses "$work/$name.one.jsonl" "$work/$name.mpi.jsonl"
  python3 -c 'import json,sys; a, b = (json.loads(open(p).readline())["accuracy"] for p in sys.argv[1:]); assert a == b, (a, b)' \
    "$work/$name.one.jsonl" "$work/$name.mpi.jsonl" || fail "$name: accuracy differs from one process"
  python3 - "$work/$name.one.jsonl" "$work/$name.mpi.jsonl" <<'PY' || fail "$name: the logged collectives are not the job's"
import json, sys
one, mpi = (json.loads(open(p).readline())["collectives"] for p in sys.argv[1:])
counts = lambda c: {k: (v["calls"], v["bytes"]) for k, v in c.items()}
assert counts(one) == counts(mpi), (one, mpi)  # every process's devices, not process 0's
PY
  "$tessera" export "$work/$name.one" "$work/$name.one.safetensors" > /dev/null
  "$tessera" export "$work/$name.mpi" "$work/$name.mpi.safetensors" > /dev/null
  same_tensors "$work/$name.one.safetensors" "$work/$name.mpi.safetensors" 2e-5
  single=single; [ "$1" = 3x2 ] && single=single24
  same_losses "$work/$single.jsonl" "$work/$name.one.jsonl"
  same_tensors "$work/$single.safetensors" "$work/$name.one.safetensors" 2e-5
done
grep -q "MiB between procs" "$work/4x1-data_parallel-np2.out" || fail "no bytes between processes reported"

stage "a sharded checkpoint on other meshes"
# A checkpoint saved sharded on mesh 2x2 by 2 processes loads on 1x4 in one
# process and on one device: the same weights, the same predictions (up to
# the order of the row-parallel sum, 1e-5).
sample_inputs "$work/x.npy"
ckpt="$work/2x2-model_parallel-np2.mpi"
"$tessera" verify "$ckpt" | grep -q "^verify: ok" || fail "verify of the sharded checkpoint: $("$tessera" verify "$ckpt" 2>&1)"
"$tessera" predict "$work/run.yaml" --set "$(mesh 1x4 model_parallel)" --checkpoint "$ckpt" \
  --input "$work/x.npy" --output "$work/p14.csv" > /dev/null
"$tessera" predict "$work/run.yaml" --set distribution=null --checkpoint "$ckpt" \
  --input "$work/x.npy" --output "$work/p11.csv" > /dev/null
same_csv "$work/p11.csv" "$work/p14.csv" 1e-5
# The same prediction as a job of two processes (process 0 writes the file).
"${mpirun[@]}" -np 2 "$tessera" predict "$work/run.yaml" --set "$(mesh 1x4 model_parallel)" --checkpoint "$ckpt" \
  --input "$work/x.npy" --output "$work/p14_np2.csv" > /dev/null
same_csv "$work/p14.csv" "$work/p14_np2.csv" 1e-5
# Evaluating it as a job of 2 (each process its rows, metrics added up) gives one process's loss and accuracy.
for mesh_shape in 2x2 4x1; do
  "$tessera" eval "$work/run.yaml" --set "$(mesh $mesh_shape model_parallel)" --checkpoint "$ckpt" --split train \
    | grep "^train" > "$work/eval-one.txt"
  "${mpirun[@]}" -np 2 "$tessera" eval "$work/run.yaml" --set "$(mesh $mesh_shape model_parallel)" --checkpoint "$ckpt" \
    --split train | grep "^train" > "$work/eval-mpi.txt"
  python3 - "$work/eval-one.txt" "$work/eval-mpi.txt" <<'PY' || fail "eval as a job of 2 on $mesh_shape: $(cat "$work/eval-one.txt" "$work/eval-mpi.txt")"
import re, sys
one, mpi = (dict(re.findall(r"(\w+) ([0-9.]+)", open(p).read())) for p in sys.argv[1:])
assert one.keys() == mpi.keys() and "accuracy" in one, (one, mpi)
assert one["accuracy"] == mpi["accuracy"], (one, mpi)
assert abs(float(one["loss"]) - float(mpi["loss"])) <= 1e-4, (one, mpi)  # printed with 4 decimals
PY
done

stage "resume"
# Resuming a sharded checkpoint in one process continues the run.
"$tessera" train "$work/run.yaml" --set training.epochs=2 --set data.train.samples=96 --set "$(mesh 1x4 model_parallel)" \
  --resume "$ckpt" > "$work/resume.txt"
grep -q "Resuming from" "$work/resume.txt" || fail "no resume: $(cat "$work/resume.txt")"
# And the other way: a one-process checkpoint (single files) resumes as a job
# of 2 on 2x2, each device reading its slices, and ends where one process does.
for how in one mpi; do
  rm -rf "$work/resume-$how"
  cp -r "$work/2x2-model_parallel-np2.one" "$work/resume-$how"
  run=("$tessera")
  [ "$how" = mpi ] && run=("${mpirun[@]}" -np 2 "$tessera")
  "${run[@]}" train "$work/run.yaml" --set training.epochs=2 --set data.train.samples=96 --set "$(mesh 2x2 model_parallel)" \
    --set training.checkpoint.dir="$work/resume-$how" --resume "$work/resume-$how" --log "$work/resume-$how.jsonl" > /dev/null
  "$tessera" export "$work/resume-$how" "$work/resume-$how.safetensors" > /dev/null
done
[ -f "$work/resume-mpi/model.safetensors.index.json" ] || fail "the resumed job did not save sharded"
same_losses "$work/resume-one.jsonl" "$work/resume-mpi.jsonl"
same_tensors "$work/resume-one.safetensors" "$work/resume-mpi.safetensors" 2e-5

stage "interrupted job"
# SIGTERM to one process of a job (a scheduler signals each task, each at a
# step of its own): all stop after the same step and save that position,
# sharded; the job exits 143, process 0 saying how to go on. Resumed as a job
# of 2, it ends where a job that never stopped ends.
job_of_2=("${mpirun[@]}" -np 2 "$tessera" train "$work/run.yaml" --set "$(mesh 2x2 model_parallel)")
wait_for_line() {  # wait_for_line PATTERN FILE JOB: until FILE has a line matching PATTERN or JOB ended
  for _ in $(seq 300); do { grep -q "$1" "$2" || ! kill -0 "$3" 2>/dev/null; } && break; sleep 0.1; done
  grep -q "$1" "$2" || fail "the job to interrupt did not start: $(cat "$2")"
}
"${job_of_2[@]}" --set training.epochs=100000 --set training.checkpoint.dir="$work/intr" > "$work/intr.out" 2>&1 &
job=$!
wait_for_line "^Saved checkpoint" "$work/intr.out" "$job"
find_rank 1 "$job" "$work/intr.out"
kill -TERM "$victim"
set +e; wait "$job"; rc=$?; set -e; job=""
[ "$rc" = 143 ] || fail "a job whose process 1 got SIGTERM exited $rc, not 143: $(tail -20 "$work/intr.out")"
interrupted=$(grep "^Interrupted by" "$work/intr.out" || true)
[ "$(grep -c "^Interrupted by" "$work/intr.out")" = 1 ] &&
  grep -qF "To go on (under mpirun, as this job was started): $tessera train" <<<"$interrupted" &&
  grep -q "^Interrupted by SIGTERM .*: saved in '$work/intr'" <<<"$interrupted" ||
  fail "the interrupted job does not say once how to go on: $(tail -20 "$work/intr.out")"
epochs=$(( $(sed -E 's/.* (at|after) epoch ([0-9]+).*/\2/' <<<"$interrupted") + 1 ))
"${job_of_2[@]}" --set training.epochs="$epochs" --set training.checkpoint.dir="$work/intr" --resume "$work/intr" \
  --log "$work/intr.jsonl" > /dev/null
"${job_of_2[@]}" --set training.epochs="$epochs" --set training.checkpoint.dir="$work/intr.ref" --log "$work/intr.ref.jsonl" > /dev/null
# (Equal runs of different lengths: tiny_synthetic's learning rate is constant.)
python3 - "$work/intr.ref.jsonl" "$work/intr.jsonl" <<'PY' || fail "the resumed job's epochs differ from the uninterrupted job's"
import json, sys
ref, resumed = ({e["epoch"]: e for e in map(json.loads, open(p))} for p in sys.argv[1:])
assert resumed and set(resumed) <= set(ref), (sorted(ref), sorted(resumed))
for epoch, r in resumed.items():  # the one it stopped in logged whole, from the saved sums
    assert abs(ref[epoch]["loss"] - r["loss"]) <= 1e-5 * abs(r["loss"]), (ref[epoch], r)
    assert ref[epoch]["accuracy"] == r["accuracy"], (ref[epoch], r)
PY
"$tessera" export "$work/intr" "$work/intr.safetensors" > /dev/null
"$tessera" export "$work/intr.ref" "$work/intr.ref.safetensors" > /dev/null
same_tensors "$work/intr.ref.safetensors" "$work/intr.safetensors" 2e-5
# SIGUSR1 to mpirun, which passes it on to every process and kills none (a
# SIGTERM it turns into SIGTERM, then SIGKILL a second later): the same stop.
"${job_of_2[@]}" --set training.epochs=100000 --set training.checkpoint.dir="$work/usr1" > "$work/usr1.out" 2>&1 &
job=$!
wait_for_line "^Saved checkpoint" "$work/usr1.out" "$job"
kill -USR1 "$job"
set +e; wait "$job"; rc=$?; set -e; job=""
[ "$rc" = 138 ] && grep -q "^Interrupted by SIGUSR1 .*: saved in '$work/usr1'" "$work/usr1.out" ||
  fail "a job mpirun passed SIGUSR1 to exited $rc: $(tail -20 "$work/usr1.out")"

stage "type auto"
# type: auto under mpirun: process 0's choice of mesh and strategy stands for
# the job (each process's own timings could choose differently), and the job
# trains to one process's losses on whatever it chose.
"${mpirun[@]}" -np 2 "$tessera" train "$work/run.yaml" "${three_steps[@]}" --set "distribution={devices: cpu:4, type: auto}" \
  --log "$work/auto.mpi.jsonl" > "$work/auto.out"
grep -q "^Distribution: .*2 processes" "$work/auto.out" || fail "type auto under mpirun: $(cat "$work/auto.out")"
"$tessera" train "$work/run.yaml" "${three_steps[@]}" --log "$work/one_device.jsonl" > /dev/null
same_losses "$work/one_device.jsonl" "$work/auto.mpi.jsonl"

stage "bench --np"
# tessera bench --np: the same configuration in one process and as a job of
# two, the latter with the bytes that crossed between processes.
"$tessera" bench "$work/run.yaml" --mesh 2x1 --layout dp,zero --np 1,2 --steps 2 --warmup 1 --format csv > "$work/bench.csv"
python3 - "$work/bench.csv" <<'PY' || fail "bench --np rows are wrong: $(cat "$work/bench.csv")"
import csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
assert [(r["layout"], r["processes"]) for r in rows] == [("dp", "1"), ("zero", "1"), ("dp", "2"), ("zero", "2")], rows
assert all(float(r["median_ms"]) > 0 for r in rows), rows
assert all(float(r["inter_process_bytes"]) > 0 for r in rows if r["processes"] == "2"), rows
assert all(float(r["inter_process_bytes"]) == 0 for r in rows if r["processes"] == "1"), rows
PY

stage "bad placements"
# Bad placements.
expect_fail 3 "distribution: the mesh has 4 devices, which 3 processes cannot share evenly" -- \
  "${mpirun[@]}" -np 3 "$tessera" train "$work/run.yaml" "${three_steps[@]}" --set "$(mesh 4x1 data_parallel)"
expect_fail 3 "2 processes were started, but the config has no distribution" -- \
  "${mpirun[@]}" -np 2 "$tessera" train "$work/run.yaml" "${three_steps[@]}"

# A process that dies or stops ends the job: the other one does not wait for
# ever, and the job's error names it. A killed one is seen by mpirun, which
# names its rank; a stopped one (alive, silent) by the collective timeout.
stop_rank 1 KILL kill -- "${mpirun[@]}" -np 2
grep -q "process rank 1 .*exited on signal 9" "$work/kill.out" || fail "the error does not name rank 1: $(cat "$work/kill.out")"
stop_rank 1 STOP stop -- "${mpirun[@]}" -np 2
grep -q "rank 0: collective error: .*waited 3.000 s for processes 1, which did not join" \
  "$work/stop.out" || fail "the timeout does not name process 1: $(cat "$work/stop.out")"
echo "mpi_test: all checks passed"
