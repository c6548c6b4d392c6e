#!/usr/bin/env bash
# bench/ab_compare.py against two stand-ins for bench_models that print fixed
# reports: it alternates which runs first, gives both the same options with
# --json, and reads the medians, ratios and wins of rows and ops.
#   ab_compare_test.sh SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fake NAME STEP_MS OP_MS [MORE_OPS]: a stand-in that logs its name and options
# and prints a report of one row (the GPT's one-thread training step) and two
# ops (and MORE_OPS, JSON members).
fake() {
  cat > "$work/$1" <<SH
#!/usr/bin/env bash
echo "$1 \$*" >> "$work/calls"
echo '{"rows": [{"model": "gpt", "mode": "train", "threads": 1, "tessera": {"median_ms": $2},
  "tessera_ops_ms": {"matmul f32 [8, 128, 256] x [256, 1024]": $3, "unary gelu_erf": 1.0${4:+, $4}}}]}'
SH
  chmod +x "$work/$1"
}
fake base 10.0 4.0
fake candidate 8.0 5.0 '"fused op": 2.5'

out=$(python3 "$src/bench/ab_compare.py" --pairs 3 "$work/base" "$work/candidate" --models gpt --steps 5 2>&1)
echo "$out"
[ "$(cut -d' ' -f1 "$work/calls" | tr '\n' ' ')" = "base candidate candidate base base candidate " ] ||
  fail "runs not alternated: $(cat "$work/calls")"
[ "$(grep -c -- "--models gpt --steps 5 --json$" "$work/calls")" = 6 ] || fail "options not passed: $(cat "$work/calls")"
grep -Eq "^gpt train 1t +10\.000 +8\.000 +0\.800 \(0\.800-0\.800\) +3 of 3$" <<<"$out" || fail "row misread: $out"
grep -Eq "^  matmul f32 \[8, 128, 256\] x \[256, 1024\] +4\.000 +5\.000 +1\.250 \(1\.250-1\.250\) +0 of 3$" <<<"$out" ||
  fail "op misread: $out"
grep -Eq "^  unary gelu_erf +1\.000 +1\.000 +1\.000 .* 0 of 3$" <<<"$out" || fail "equal op misread: $out"
grep -Eq "^  fused op +- +2\.500 +only in the candidate$" <<<"$out" || fail "the candidate's own op misread: $out"

# A binary that fails stops the comparison with its message, not a traceback.
printf '#!/usr/bin/env bash\necho "bad option" >&2\nexit 109\n' > "$work/broken" && chmod +x "$work/broken"
expect_fail 1 "ab_compare: $work/broken exited with 109: bad option" -- \
  python3 "$src/bench/ab_compare.py" "$work/broken" "$work/candidate"
# Counts that make no sense are refused, naming the option and the value.
expect_fail 2 "ab_compare.py: error: --ops must be 0 (no ops) or more, got -1" -- \
  python3 "$src/bench/ab_compare.py" --ops -1 "$work/base" "$work/candidate"
expect_fail 2 "ab_compare.py: error: --pairs must be at least 1, got 0" -- \
  python3 "$src/bench/ab_compare.py" --pairs 0 "$work/base" "$work/candidate"
echo "ab_compare: ok"
