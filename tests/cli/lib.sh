# Helpers of the end-to-end tests (sourced by cli_test.sh and mpi_test.sh).

fail() { echo "FAIL: $*" >&2; exit 1; }

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
