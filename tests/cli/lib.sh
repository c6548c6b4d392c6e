# Helpers of the end-to-end tests (sourced by cli_test.sh, mpi_test.sh and multihost_test.sh).

fail() { echo "FAIL: $*" >&2; exit 1; }

# stage NAME: what the test does now, for the watchdog's report (and a timeline on stderr).
stage() { echo "$*" > "$work/.stage"; echo "[${SECONDS} s] $*" >&2; }

# watchdog LIMIT_S: a test that outlives LIMIT_S (set it below ctest's timeout,
# which kills silently) prints the stage it was in and the stacks of every
# thread of every process whose command line names $work, then kills them, so
# that a hang shows where it hung. Stopped with the test (trap in the caller).
watchdog() {
  (
    set +e  # a report that half fails must still end the processes
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    sleep "$1" & nap=$!
    wait "$nap"
    echo "TIMEOUT: the test ran past $1 s in stage: $(cat "$work/.stage" 2>/dev/null)" >&2
    for pid in $(pgrep -f -- "$work"); do
      [ "$pid" = "$BASHPID" ] && continue
      echo "--- process $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" >&2
      command -v gdb > /dev/null &&
        timeout 30 gdb -nx -batch -iex "set auto-load off" -p "$pid" -ex "thread apply all bt 25" 2>&1 | grep -E "^(Thread|#)" >&2
    done
    pkill -KILL -f -- "$work"
  ) &
  watchdog_pid=$!
}

expect_fail() {  # expect_fail CODE PATTERN -- command...
  local code=$1 pattern=$2; shift 3
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [ "$rc" = "$code" ] || fail "expected exit $code, got $rc from: $* -- $out"
  grep -q -- "$pattern" <<<"$out" || fail "expected '$pattern' in: $out"
}

same_losses() {  # same_losses SINGLE.jsonl OTHER.jsonl: every epoch's loss within 1e-5 relative
  python3 - "$1" "$2" <<'PY' || fail "losses of $2 differ from $1"
import json, sys
single, other = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(single) == len(other)
for a, b in zip(single, other):
    assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a["loss"], b["loss"])
PY
}

same_tensors() {  # same_tensors A B ATOL: the same f32 tensors (names, shapes), each element within ATOL + 1e-4 relative
  python3 - "$1" "$2" "$3" <<'PY' || fail "tensors of $2 differ from $1"
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        lo, hi = e["data_offsets"]
        assert e["dtype"] == "F32", (name, e["dtype"])
        out[name] = (e["shape"], struct.unpack("<%df" % ((hi - lo) // 4), data[8 + n + lo:8 + n + hi]))
    return out
a, b, atol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
for name in a:
    assert a[name][0] == b[name][0], (name, a[name][0], b[name][0])
    for x, y in zip(a[name][1], b[name][1]):
        assert abs(x - y) <= atol + 1e-4 * abs(x), (name, x, y)
PY
}

same_csv() {  # same_csv A B ATOL: numbers of two CSV files within ATOL
  python3 - "$1" "$2" "$3" <<'PY' || fail "$2 differs from $1"
import sys
rows = [[list(map(float, l.split(","))) for l in open(p) if l.strip()] for p in sys.argv[1:3]]
assert len(rows[0]) == len(rows[1])
for r, s in zip(*rows):
    for x, y in zip(r, s):
        assert abs(x - y) <= float(sys.argv[3]), (x, y)
PY
}

# mesh BATCHxMODEL TYPE: a distribution override of tiny_synthetic.yaml over
# cpu:BATCH*MODEL; model_parallel splits both dense layers over `model`.
mesh_layouts="layout_map: {'dense/kernel': [null, model], 'dense/bias': [model], 'dense_1/kernel': [model, null]}"
mesh() {
  echo "distribution={devices: cpu:$(( ${1%x*} * ${1#*x} )), mesh: {shape: [${1%x*}, ${1#*x}], axis_names: [batch, model]}, type: $2$([ "$2" = model_parallel ] && echo ", $mesh_layouts")}"
}

# find_rank RANK JOB OUTPUT: sets $victim to the pid of the process of RANK
# in the job JOB (mpirun's pid) of $work/run.yaml, whose output is in OUTPUT.
find_rank() {
  local rank=$1 job=$2 output=$3 pid
  victim=""
  for _ in $(seq 20); do  # a rank on another (namespaced) host of this machine can show up in /proc a little later
    for pid in $(pgrep -f "$work/run.yaml"); do
      tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank" && victim=$pid
    done
    [ -z "$victim" ] && kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$victim" ] || fail "no process of rank $rank found; the job $(kill -0 "$job" 2>/dev/null && echo "still runs" ||
    echo "had ended"); processes naming run.yaml: $(pgrep -af "$work/run.yaml" | cut -c1-160); its output: $(tail -n 20 "$output")"
}

# stop_rank RANK SIGNAL NAME -- LAUNCHER...: starts a long data-parallel job
# of $work/run.yaml on 4 devices with LAUNCHER (mpirun and its -np), sends
# SIGNAL to the process of RANK once the job has logged its first epoch, and
# waits for the job's end, which must be a failure within 10 s. The job's
# output is in $work/NAME.out; the process it signalled is $victim. The job
# saves no checkpoints: a process stopped while writing its shard is waited
# for as long as file I/O may take (30 minutes), and with epochs of 3 steps
# the signal would often land in a save.
stop_rank() {
  local rank=$1 signal=$2 name=$3 job start
  shift 4
  stage "rank $rank gets SIG$signal"
  "$@" "$tessera" train "$work/run.yaml" --set training.epochs=100000 --set training.checkpoint=false --set "$(mesh 4x1 data_parallel)" \
    --set distribution.collective_timeout_s=3 --log "$work/$name.jsonl" > "$work/$name.out" 2>&1 &
  job=$!
  for _ in $(seq 300); do { [ -s "$work/$name.jsonl" ] || ! kill -0 "$job" 2>/dev/null; } && break; sleep 0.1; done
  [ -s "$work/$name.jsonl" ] || fail "the job to $name did not start: $(cat "$work/$name.out")"
  find_rank "$rank" "$job" "$work/$name.out"
  start=$SECONDS
  kill "-$signal" "$victim"
  set +e; wait "$job"; rc=$?; set -e
  [ "$rc" != 0 ] || fail "$name: the job succeeded"
  [ $((SECONDS - start)) -le 10 ] || fail "$name: the job took $((SECONDS - start)) s to end"
}

sample_inputs() {  # sample_inputs PATH: 10 seeded inputs of tiny_synthetic.yaml (8 features) as a .npy file
  python3 - "$1" <<'PY'
import random, struct, sys
random.seed(0)
rows, cols = 10, 8
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % (rows * cols), *[random.gauss(0, 1) for _ in range(rows * cols)]))
PY
}
