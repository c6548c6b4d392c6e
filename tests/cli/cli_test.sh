#!/usr/bin/env bash
# End-to-end checks of the tessera program: train with a checkpoint, eval,
# predict, resume, and the exit codes and messages of bad input.
# Usage: cli_test.sh TESSERA_BINARY SOURCE_DIR
set -euo pipefail
tessera=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # a run without a checkpoint folder saves under ./runs: here, not in the build tree
source "$(dirname "$0")/lib.sh"

cp "$src/configs/tiny_synthetic.yaml" "$work/run.yaml"
"$tessera" train "$work/run.yaml" --set training.checkpoint.dir="$work/ckpt" --set training.epochs=2 \
  --log "$work/metrics.jsonl" > "$work/train.txt"
[ -f "$work/ckpt/model.safetensors" ] || fail "no checkpoint written"
[ "$(wc -l < "$work/metrics.jsonl")" = 2 ] || fail "expected 2 metric lines"
grep -q '"accuracy"' "$work/metrics.jsonl" || fail "metrics log lacks accuracy"

out=$("$tessera" eval "$work/run.yaml" --checkpoint "$work/ckpt" --split train)
grep -q "accuracy" <<<"$out" || fail "eval printed no accuracy: $out"

# predict: inputs from a .npy written by python's struct (no numpy needed).
python3 - "$work/x.npy" <<'PY'
import struct, sys
header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }"
header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<32f", *[0.1 * i for i in range(32)]))
PY
"$tessera" predict "$work/run.yaml" --checkpoint "$work/ckpt" --input "$work/x.npy" --output "$work/y.csv" > /dev/null
[ "$(wc -l < "$work/y.csv")" = 4 ] || fail "expected 4 prediction rows"
[ "$(head -1 "$work/y.csv" | tr ',' '\n' | wc -l)" = 3 ] || fail "expected 3 outputs per row"
# The CSV holds the same floats as the .npy, not 6 significant digits of them.
"$tessera" predict "$work/run.yaml" --checkpoint "$work/ckpt" --input "$work/x.npy" --output "$work/y.npy" > /dev/null
python3 - "$work/y.csv" "$work/y.npy" <<'PY' || fail "predict's CSV does not read back as its .npy's floats"
import struct, sys
csv = [struct.unpack("<f", struct.pack("<f", float(v)))[0] for line in open(sys.argv[1]) for v in line.split(",")]
raw = open(sys.argv[2], "rb").read()
header_len = struct.unpack("<H", raw[8:10])[0]
npy = list(struct.unpack("<%df" % len(csv), raw[10 + header_len:]))
assert csv == npy, (csv, npy)
PY

# Issue 19's command line: --version, a misspelt command, an option that is a
# config key, --devices as bench spells it, a log in a folder not made yet,
# --profile in milliseconds, inspect's trainable and non-trainable counts.
"$tessera" --version | grep -q "^tessera [0-9]*\.[0-9]*\.[0-9]*$" || fail "--version: $("$tessera" --version 2>&1)"
expect_fail 2 "unknown command 'trian'; did you mean 'train'?" -- "$tessera" trian "$work/run.yaml"
expect_fail 2 "Hint: config values are set with --set: --set training.epochs=1" -- "$tessera" train "$work/run.yaml" --epochs 1
[ "$("$tessera" devices --devices cpu:3 | grep -c "^cpu:")" = 3 ] || fail "devices --devices cpu:3 did not list 3 devices"
"$tessera" train "$work/run.yaml" --set training.epochs=1 --set training.checkpoint=false --profile \
  --log "$work/logs/new/metrics.jsonl" > "$work/profile.txt"
[ -s "$work/logs/new/metrics.jsonl" ] || fail "--log into a folder that did not exist wrote nothing"
grep -q "^op  *ms  *share  *calls" "$work/profile.txt" || fail "--profile's table is not in milliseconds: $(cat "$work/profile.txt")"
"$tessera" inspect "$work/run.yaml" | grep -q "^Trainable params: [0-9]*$" || fail "inspect gives no trainable count"
# eval of 200 batches, piped: plain progress lines (a tenth apart), no escape codes, then the result.
"$tessera" eval "$work/run.yaml" --checkpoint "$work/ckpt" --split train --set data.train.samples=6400 > "$work/eval.txt"
[ "$(grep -c "^Evaluating \[=*  *\] [0-9]*/200 - loss" "$work/eval.txt")" = 9 ] || fail "eval piped: $(cat "$work/eval.txt")"
grep -q "$(printf '\033')" "$work/eval.txt" && fail "eval wrote escape codes into a pipe"
tail -1 "$work/eval.txt" | grep -q "^train (6400 samples): loss" || fail "eval's result is not its last line"
# validation_split: the last quarter of data.train is validated on, and said; eval --split validation finds it.
out=$("$tessera" train "$work/run.yaml" --set training.validation_split=0.25 --set training.epochs=1 \
  --set training.checkpoint.dir="$work/split" --set 'training.metrics=[accuracy, auc, precision, recall]')
grep -q "192 samples (64 more held out for validation: validation_split 0.25)" <<<"$out" || fail "split not said: $out"
grep -q "val_auc [0-9.]* - val_precision" <<<"$out" || fail "no validation metrics: $out"
out=$("$tessera" eval "$work/run.yaml" --checkpoint "$work/split" --set training.validation_split=0.25)
grep -q "^validation (64 samples): loss" <<<"$out" || fail "eval did not take the held-out samples: $out"
# A data file that does not exist: the error names the config key that named it.
sed 's|  train: {type: synthetic.*|  train: {type: csv, path: missing.csv, label_column: 8}|' "$work/run.yaml" > "$work/missing_data.yaml"
expect_fail 3 "missing_data.yaml:19:10: data.train: .*missing.csv" -- "$tessera" train "$work/missing_data.yaml"

# Resume continues from the checkpoint's epoch.
out=$("$tessera" train "$work/run.yaml" --set training.checkpoint.dir="$work/ckpt" --set training.epochs=3 \
  --resume "$work/ckpt")
grep -q "Epoch 3/3" <<<"$out" || fail "resume did not run epoch 3: $out"
grep -q "Epoch 1/3" <<<"$out" && fail "resume trained epoch 1 again"

# SIGTERM (as Ctrl-C's SIGINT) stops training after the step it is in, saves
# that position and says how to go on; the exit code is the shell's for that
# signal (143). A job this script puts in the background starts with SIGINT
# ignored, which it keeps.
"$tessera" train "$work/run.yaml" --set training.checkpoint.dir="$work/interrupted" \
  --set training.epochs=1000000 > "$work/interrupted.txt" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "Saved checkpoint" "$work/interrupted.txt" && break; sleep 0.1; done
kill -INT "$pid"
sleep 0.5
kill -0 "$pid" 2>/dev/null || fail "a background train stopped on SIGINT, which it was started ignoring"
kill -TERM "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" = 143 ] || fail "a train stopped by SIGTERM exited $rc, not 143: $(tail -3 "$work/interrupted.txt")"
last=$(tail -1 "$work/interrupted.txt")
resume="$tessera train $work/run.yaml --set training.checkpoint.dir=$work/interrupted --set training.epochs=1000000 --resume $work/interrupted"
grep -qF "To go on: $resume" <<<"$last" && grep -q "^Interrupted by SIGTERM .*: saved in '$work/interrupted'" <<<"$last" ||
  fail "the last line of an interrupted train does not say how to go on: $last"
epoch=$(sed -E 's/.* (at|after) epoch ([0-9]+).*/\2/' <<<"$last")
out=$("$tessera" train "$work/run.yaml" --set training.epochs="$((epoch + 1))" --resume "$work/interrupted")
grep -q "Weights of epoch $((epoch + 1)) are in '$work/interrupted'" <<<"$out" || fail "the interrupted run did not resume: $out"
# SIGUSR1 (Slurm's signal ahead of a time limit) stops it alike: exit 138.
"$tessera" train "$work/run.yaml" --set training.checkpoint.dir="$work/usr1" \
  --set training.epochs=1000000 > "$work/usr1.txt" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "Saved checkpoint" "$work/usr1.txt" && break; sleep 0.1; done
kill -USR1 "$pid"
set +e; wait "$pid"; rc=$?; set -e
[ "$rc" = 138 ] && grep -q "^Interrupted by SIGUSR1 .*: saved in '$work/usr1'" "$work/usr1.txt" ||
  fail "a train stopped by SIGUSR1 exited $rc: $(tail -3 "$work/usr1.txt")"
# Two signals at once (both pending while the process is stopped): the first
# taken is caught, the other ends the process (which is first is the kernel's
# choice: 138 or 143, and no line of a stop that was caught).
"$tessera" train "$work/run.yaml" --set training.checkpoint.dir="$work/twice" \
  --set training.epochs=1000000 > "$work/twice.txt" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q "Saved checkpoint" "$work/twice.txt" && break; sleep 0.1; done
kill -STOP "$pid"; kill -USR1 "$pid"; kill -TERM "$pid"; kill -CONT "$pid"
set +e; wait "$pid"; rc=$?; set -e
{ [ "$rc" = 138 ] || [ "$rc" = 143 ]; } && ! grep -q "^Interrupted by" "$work/twice.txt" ||
  fail "a second signal did not end a train at once (exit $rc): $(tail -2 "$work/twice.txt")"

# A relative path given by --set is the working directory's, like --checkpoint's:
# the README's train-then-predict commands agree.
mkdir "$work/cwd"
(cd "$work/cwd" && "$tessera" train ../run.yaml --set training.epochs=1 --set training.checkpoint.dir=runs/x > /dev/null &&
  "$tessera" eval ../run.yaml --checkpoint runs/x --split train > /dev/null) ||
  fail "a checkpoint saved under --set training.checkpoint.dir=runs/x did not load from --checkpoint runs/x"

# Training keeps what it trains: without a checkpoint folder, each run saves to
# a new runs/<config>/<n>, links runs/<config>/latest to it and says where it is;
# a resumed run saves where it resumed from; `checkpoint: false` saves nothing.
mkdir "$work/default" && cd "$work/default"
out=$("$tessera" train ../run.yaml --set training.epochs=1)
grep -q "Checkpoints: 'runs/run/1'" <<<"$out" || fail "the first lines do not name the run folder: $out"
last=$(tail -1 <<<"$out")
grep -qF "Weights of epoch 1 are in 'runs/run/1'. Next: $tessera eval ../run.yaml --checkpoint runs/run/1" <<<"$last" ||
  fail "the last line does not say where the weights are: $last"
"$tessera" train ../run.yaml --set training.epochs=1 > /dev/null
[ "$(readlink runs/run/latest)" = 2 ] || fail "runs/run/latest does not point at the second run"
[ -f runs/run/1/model.safetensors ] || fail "the second run replaced the first run's weights"
"$tessera" eval ../run.yaml --checkpoint runs/run/latest --split train > /dev/null || fail "eval of runs/run/latest failed"
out=$("$tessera" train ../run.yaml --set training.epochs=2 --resume runs/run/1)
grep -q "Saved checkpoint 'runs/run/1' (epoch 2" <<<"$out" || fail "the resumed run did not save where it resumed from: $out"
[ ! -e runs/run/3 ] || fail "the resumed run made a new run folder"
out=$("$tessera" train ../run.yaml --set training.epochs=1 --set training.checkpoint=false)
grep -q "Nothing was saved (training.checkpoint: false)" <<<"$out" || fail "checkpoint: false still saved: $out"
[ ! -e runs/run/3 ] || fail "checkpoint: false made a run folder"
cd "$work"

# Bad input: clear messages, exit code 3, nothing overwritten.
expect_fail 3 "unknown key 'epoch' (did you mean 'epochs'?)" -- "$tessera" train "$work/run.yaml" --set training.epoch=2
sed 's/units: 16/unit: 16/' "$work/run.yaml" > "$work/typo.yaml"
expect_fail 3 "typo.yaml:9:.*unknown key 'unit' (did you mean 'units'?)" -- "$tessera" inspect "$work/typo.yaml"
expect_fail 3 "cannot open" -- "$tessera" train "$work/run.yaml" --set data.train="{type: idx, images: missing.gz, labels: missing.gz}"
expect_fail 3 "unknown optimizer 'adamm'" -- "$tessera" train "$work/run.yaml" --set training.optimizer=adamm
# Samples that do not fit the model's input: the data's key is named, with its line.
expect_fail 3 "run.yaml:[0-9]*:[0-9]*: data.train: data 'synthetic classification .*' has 256 samples of shape \[5\] (5 values each) but model input 'features' takes \[8\] (8 values)" -- \
  "$tessera" train "$work/run.yaml" --set "data.train.shape=[5]" --set training.checkpoint=false
# A zoo model file that is not there: the key's location, and where it was looked for.
printf 'model: nothere.yaml\n' > "$work/zoo_ref.yaml"
expect_fail 3 "zoo_ref.yaml:1:8: model: the model file 'nothere.yaml' does not exist (looked for '$work/nothere.yaml'" -- \
  "$tessera" inspect "$work/zoo_ref.yaml"
# --device: the config's device:, checked where a GPU is asked of a machine without one.
"$tessera" eval "$work/run.yaml" --device cpu --checkpoint "$work/ckpt" --split train | grep -q "^train" || fail "eval --device cpu"
if ! "$tessera" devices | grep -q "^cuda:0"; then
  expect_fail 3 "'cuda:0': " -- "$tessera" train "$work/run.yaml" --device cuda:0 --set training.checkpoint=false
fi
# generate: a classifier writes no text; options are checked before anything loads.
expect_fail 4 "does not generate text: its input is not one sequence of integer tokens" -- \
  "$tessera" generate "$work/run.yaml" --checkpoint "$work/ckpt" --prompt hello
expect_fail 3 "no prompt: give --prompt TEXT" -- "$tessera" generate "$work/run.yaml" --checkpoint "$work/ckpt"
expect_fail 3 "temperature must be 0 (greedy) or a finite number above 0" -- \
  "$tessera" generate "$work/run.yaml" --checkpoint "$work/ckpt" --prompt hi --temperature -1
expect_fail 3 "cannot read the prompt file" -- \
  "$tessera" generate "$work/run.yaml" --checkpoint "$work/ckpt" --prompt-file "$work/missing.txt"
# generate through a declared tokenizer: GPT-2's byte-level BPE with the 256
# byte symbols and no merges (so it reads a byte model's tokens), whose end of
# text is the space. A text ends at its first space; --ignore-eos goes on.
python3 - "$work" <<'PY'
import json, sys
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
symbols, extra = {}, 0
for b in range(256):
    symbols[b] = chr(b) if b in printable else chr(256 + extra)
    extra += b not in printable
folder = sys.argv[1]
json.dump({symbols[b]: b for b in range(256)}, open(f"{folder}/vocab.json", "w"), ensure_ascii=False)
open(f"{folder}/merges.txt", "w").write("#version: 0.2\n")
open(f"{folder}/text.txt", "w").write("ab cd " * 400)
open(f"{folder}/gpt.yaml", "w").write(f"""model:
  name: spaced_gpt
  tokenizer: {{type: bpe, vocab: vocab.json, merges: merges.txt, end_of_text: "{symbols[32]}"}}
  inputs: [{{name: tokens, shape: [16], dtype: i32}}]
  layers:
    - {{type: Embedding, name: token_embedding, input_dim: 256, output_dim: 32, inputs: [tokens]}}
    - {{type: PositionEmbedding, name: position_embedding, sequence_length: 16, inputs: [token_embedding]}}
    - {{type: Add, name: embeddings, inputs: [token_embedding, position_embedding]}}
    - {{type: TransformerBlock, name: block_0, num_heads: 2, key_dim: 16, ff_dim: 64, causal: true, inputs: [embeddings]}}
    - {{type: LayerNormalization, name: final_norm, inputs: [block_0]}}
    - {{type: Dense, name: head, units: 256, use_bias: false, inputs: [final_norm]}}
training: {{loss: {{type: sparse_categorical_crossentropy, from_logits: true}}, optimizer: {{type: adam, learning_rate: 0.01}},
           batch_size: 8, epochs: 3, seed: 1, checkpoint: {{dir: {folder}/gpt_ckpt}}}}
data: {{train: {{type: text, path: text.txt, context: 16}}}}
""")
PY
"$tessera" train "$work/gpt.yaml" > /dev/null
ended=$("$tessera" generate "$work/gpt.yaml" --checkpoint "$work/gpt_ckpt" --prompt "ab cd ab" --temperature 0 \
  --max-new-tokens 12 2> /dev/null)
[ "$ended" = "ab cd ab" ] || fail "generate did not end at the tokenizer's end of text (a space): '$ended'"
went_on=$("$tessera" generate "$work/gpt.yaml" --checkpoint "$work/gpt_ckpt" --prompt "ab cd ab" --temperature 0 \
  --max-new-tokens 12 --ignore-eos 2> /dev/null)
[ "${#went_on}" = 20 ] && [[ "$went_on" == "ab cd ab "* ]] || fail "generate --ignore-eos: '$went_on'"

before=$(md5sum "$work/ckpt/model.safetensors")
expect_fail 3 "tiny/dense/kernel" -- "$tessera" eval "$work/run.yaml" --set model.layers.0.units=32 --checkpoint "$work/ckpt" --split train
[ "$before" = "$(md5sum "$work/ckpt/model.safetensors")" ] || fail "a failed load changed the checkpoint"
# tessera verify: a good checkpoint passes; flipped bytes fail it, and a load,
# naming the file and the tensor (issue 18: eval had printed loss 1.7e26).
"$tessera" verify "$work/ckpt" | grep -q "^verify: ok" || fail "verify of a good checkpoint: $("$tessera" verify "$work/ckpt" 2>&1)"
cp -r "$work/ckpt" "$work/damaged"
python3 - "$work/damaged/model.safetensors" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
for i in range(len(data) - 40, len(data)):
    data[i] ^= 0xFF
open(sys.argv[1], "wb").write(data)
PY
expect_fail 3 "tensor 'tiny/.*model.safetensors': its bytes do not match the checksum" -- "$tessera" verify "$work/damaged"
expect_fail 3 "its bytes do not match the checksum" -- \
  "$tessera" eval "$work/run.yaml" --checkpoint "$work/damaged" --split train
# verify and export of a checkpoint of 60 variables (and their Adam state),
# piped: plain progress lines, tensor by tensor, then the result.
{
  sed -n '/^training:/,$p' "$work/run.yaml" | sed 's/epochs: [0-9]*/epochs: 1/'
  echo "model:"
  echo "  name: deep"
  echo "  inputs: [{name: x, shape: [8]}]"
  echo "  layers:"
  for _ in $(seq 29); do echo "    - {type: Dense, units: 4, activation: relu}"; done
  echo "    - {type: Dense, units: 3}"
} > "$work/deep.yaml"
"$tessera" train "$work/deep.yaml" --set training.checkpoint.dir="$work/deep" > /dev/null
"$tessera" verify "$work/deep" > "$work/verify_deep.txt"
[ "$(grep -c "^Verifying \[=*  *\] [0-9]*/[0-9]* - [0-9]* tensors/s" "$work/verify_deep.txt")" -ge 5 ] ||
  fail "verify piped shows no progress: $(cat "$work/verify_deep.txt")"
"$tessera" export "$work/deep" "$work/deep.safetensors" > "$work/export_deep.txt"
[ "$(grep -c "^Exporting \[=*  *\] [0-9]*/60 - [0-9]* tensors/s" "$work/export_deep.txt")" = 9 ] ||
  fail "export piped shows no progress: $(cat "$work/export_deep.txt")"
grep -q "$(printf '\033')" "$work/verify_deep.txt" "$work/export_deep.txt" && fail "verify or export wrote escape codes into a pipe"
tail -1 "$work/export_deep.txt" | grep -q "^Wrote 60 tensors" || fail "export's result is not its last line"

# A NaN weight whose checksum agrees (a file written so): verify lists it,
# a load refuses it unless asked.
cp -r "$work/ckpt" "$work/nan"
python3 - "$work/nan/model.safetensors" <<'PY'
import json, struct, sys, zlib
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = next(k for k in header if k.endswith("dense/kernel"))
begin, end = (8 + n + o for o in header[name]["data_offsets"])
data[begin:begin + 4] = struct.pack("<f", float("nan"))
checksums = json.loads(header["__metadata__"]["tessera.crc32"])  # metadata values are strings
checksums[name] = "%08x" % zlib.crc32(bytes(data[begin:end]))
header["__metadata__"]["tessera.crc32"] = json.dumps(checksums)
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
"$tessera" verify "$work/nan" > "$work/verify_nan.txt" && fail "verify passed a NaN weight"
grep -q "^non-finite: tiny/dense/kernel: 1 of" "$work/verify_nan.txt" || fail "verify did not list the NaN: $(cat "$work/verify_nan.txt")"
expect_fail 3 "tensor 'tiny/dense/kernel': 1 of .* values are NaN or infinite (the first at element 0); refused" -- \
  "$tessera" eval "$work/run.yaml" --checkpoint "$work/nan" --split train
"$tessera" eval "$work/run.yaml" --checkpoint "$work/nan" --split train --allow-non-finite > /dev/null ||
  fail "eval --allow-non-finite did not load the NaN weight"

# Sharded training: a 2x2 mesh with column- then row-parallel layers reaches
# the single-device losses, and its checkpoint loads on one device.
cp "$work/run.yaml" "$work/sharded.yaml"
cat >> "$work/sharded.yaml" <<'YAML'
distribution:
  devices: cpu:4
  mesh: {shape: [2, 2], axis_names: [batch, model]}
  type: model_parallel
  layout_map:
    'dense/kernel': [null, model]
    'dense/bias': [model]
    'dense_1/kernel': [model, null]
YAML
"$tessera" train "$work/run.yaml" --set training.epochs=2 --log "$work/single.jsonl" > /dev/null
"$tessera" train "$work/sharded.yaml" --set training.epochs=2 --set training.checkpoint.dir="$work/sharded_ckpt" \
  --log "$work/sharded.jsonl" > "$work/sharded.txt"
grep -q "all_reduce *model" "$work/sharded.txt" || fail "no model-axis all-reduce reported: $(cat "$work/sharded.txt")"
same_losses "$work/single.jsonl" "$work/sharded.jsonl"
grep -q '"all_reduce batch"' "$work/sharded.jsonl" || fail "the log has no batch-axis all-reduce"
# The model's own layouts win over the layout map's keys (Keras: a variable's _layout first), and give the same losses.
own="model.layouts={tiny/dense/kernel: [null, model], tiny/dense/bias: [model]}"
"$tessera" train "$work/sharded.yaml" --set training.epochs=2 --set "$own" --set "distribution.layout_map={kernel: [model, null]}" \
  --set training.checkpoint=false --log "$work/own.jsonl" > /dev/null
same_losses "$work/single.jsonl" "$work/own.jsonl"
out=$("$tessera" inspect "$work/sharded.yaml" --set "$own" --set "distribution.layout_map={kernel: [model, null]}")
grep -q "tiny/dense/kernel  *\[None, model\] .*its own layout" <<<"$out" || fail "inspect does not show the model's own layout: $out"
grep -q "tiny/dense_1/kernel  *\[model, None\] .*key 'kernel'" <<<"$out" || fail "inspect does not show the key's layout: $out"
# --visualize takes a layout key's short path (issue 19), and names the variable it found.
"$tessera" inspect "$work/sharded.yaml" --visualize dense/kernel | grep -q "^tiny/dense/kernel \[8, 16\] as" ||
  fail "--visualize dense/kernel: $("$tessera" inspect "$work/sharded.yaml" --visualize dense/kernel 2>&1 | tail -5)"
expect_fail 1 "'kernel' ends several variables' paths; say which" -- "$tessera" inspect "$work/sharded.yaml" --visualize kernel
expect_fail 3 "unknown variable 'tiny/dense/kernal' (did you mean 'tiny/dense/kernel'?)" -- \
  "$tessera" inspect "$work/sharded.yaml" --set "model.layouts={tiny/dense/kernal: [null, model]}"
expect_fail 3 "a layout of its own, which needs type: model_parallel" -- \
  "$tessera" inspect "$work/run.yaml" --set "$own" --set "distribution={devices: cpu:2}"
# AutoTP chooses the same column/row pair by itself, and says so.
"$tessera" train "$work/run.yaml" --set training.epochs=2 --log "$work/auto.jsonl" \
  --set "distribution={devices: cpu:4, type: auto_tp, mesh: {shape: [2, 2]}}" > /dev/null
same_losses "$work/single.jsonl" "$work/auto.jsonl"
grep -q '"all_reduce model"' "$work/auto.jsonl" || fail "AutoTP's log has no model-axis all-reduce"
out=$("$tessera" inspect "$work/run.yaml" --set "distribution={devices: cpu:4, type: auto_tp, mesh: {shape: [2, 2]}}")
grep -q "dense_1 .*row-parallel" <<<"$out" || fail "inspect shows no AutoTP rule: $out"
# A key that Keras 3.14's fullmatch would read otherwise is named; a Python-only regex is an error at its entry.
tp='devices: cpu:2, type: model_parallel, mesh: {shape: [1, 2], axis_names: [batch, model]}'
out=$("$tessera" inspect "$work/run.yaml" --set "distribution={$tp, layout_map: {dense/kernel: [null, model]}}")
grep -q "note: 'tiny/dense/kernel' is decided by key 'dense/kernel' under layout_map_match: search, by no key (replicated) under fullmatch" \
  <<<"$out" || fail "inspect does not name what fullmatch decides differently: $out"
expect_fail 3 "key '(?i)kernel' uses an inline flag" -- \
  "$tessera" inspect "$work/run.yaml" --set "distribution={$tp, layout_map: {'(?i)kernel': [null, model]}}"
expect_fail 3 "training.batch_size: the batch size 10 does not divide over the batch axis 'batch' of 4 devices" -- \
  "$tessera" train "$work/run.yaml" --set training.batch_size=10 --set "distribution={devices: cpu:4}"
# type auto picks a mesh and strategy; training still gives one device's losses.
"$tessera" train "$work/run.yaml" --set training.epochs=2 --log "$work/auto_mesh.jsonl" \
  --set "distribution={devices: cpu:4, type: auto}" > /dev/null
same_losses "$work/single.jsonl" "$work/auto_mesh.jsonl"
out=$("$tessera" plan "$work/run.yaml" --set "distribution={devices: cpu:4, type: auto}")
grep -q "<- chosen" <<<"$out" || fail "plan shows no automatic choice: $out"
expect_fail 3 "no mesh of 4 devices with any strategy fits memory_limit 100 bytes" -- \
  "$tessera" plan "$work/run.yaml" --set "distribution={devices: cpu:4, type: auto, memory_limit: 100}"
# plan predicts without running; bench sweeps configurations, its outputs parse back.
out=$("$tessera" plan "$work/sharded.yaml")
grep -q "Predicted step" <<<"$out" || fail "plan printed no prediction: $out"
"$tessera" bench "$work/run.yaml" --mesh 1x2,2x1 --layout dp,tp,auto --steps 2 --warmup 1 --format csv \
  --chart "$work/chart.svg" > "$work/bench.csv"
"$tessera" bench "$work/run.yaml" --mesh 2x2 --layout fsdp --steps 2 --warmup 1 --format json > "$work/bench.json"
python3 - "$work/bench.csv" "$work/bench.json" "$work/chart.svg" <<'PY' || fail "bench outputs do not parse back"
import csv, json, sys, xml.etree.ElementTree as ET
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")))
assert [(r["mesh"], r["layout"]) for r in rows] == [(m, l) for m in ("1x2", "2x1") for l in ("dp", "tp", "auto")], rows
assert all(float(r["median_ms"]) > 0 and float(r["samples_per_s"]) > 0 for r in rows), rows
assert all(float(r["min_ms"]) <= float(r["median_ms"]) <= float(r["max_ms"]) for r in rows), rows
assert all(float(r["speedup_min"]) <= float(r["speedup"]) <= float(r["speedup_max"]) for r in rows), rows
assert any("all_reduce" in r["collectives_mib"] for r in rows), rows
# One best row; auto runs the program of the layout it chose, and tp over a model axis of 1 is dp.
assert sum("best" in r["notes"].split("; ") for r in rows) == 1, rows
by = {(r["mesh"], r["layout"]): r for r in rows}
assert "same program as 2x1 dp" in by[("2x1", "tp")]["notes"], rows
for mesh in ("1x2", "2x1"):
    auto = by[(mesh, "auto")]
    if auto["chosen"] in ("dp", "tp") and not (mesh == "2x1" and auto["chosen"] == "tp"):
        assert f"same program as {mesh} {auto['chosen']}" in auto["notes"], rows
assert "same program" not in by[("1x2", "tp")]["notes"], rows
j = json.load(open(sys.argv[2]))
assert len(j["rows"]) == 1 and j["rows"][0]["layout"] == "fsdp", j
assert j["spearman"] is None, j  # one row ranks nothing
row = j["rows"][0]
assert row["collective_bytes_per_step"] == {k: v for k, v in row["predicted_collective_bytes_per_step"].items() if v}, row
svg = ET.parse(sys.argv[3]).getroot()
ns = "{http://www.w3.org/2000/svg}"
assert svg.tag.endswith("svg")
assert len([e for e in svg.iter(ns + "rect") if e.get("class") == "bar"]) == 6, "one bar per row"
assert len([e for e in svg.iter(ns + "rect") if e.get("class") == "baseline"]) == 1, "one bar for one device"
assert len([e for e in svg.iter(ns + "path") if e.get("class") == "whisker"]) == 7, "a min-max whisker per bar"
texts = [e.text or "" for e in svg.iter(ns + "text")]
assert any(t.startswith("samples/s") for t in texts), texts  # the axis names its unit
assert "one device's median" in texts and "min-max over rounds" in texts, texts  # the legend
assert any(t.startswith("one device (") for t in texts), texts
PY
expect_fail 3 "unknown layout 'zerro'" -- "$tessera" bench "$work/run.yaml" --mesh 2x1 --layout zerro
expect_fail 3 "'2x1x5' is not BATCHxMODEL" -- "$tessera" bench "$work/run.yaml" --mesh 2x1x5 --layout dp
expect_fail 3 "'cpu:2x' is not cpu:N" -- "$tessera" bench "$work/run.yaml" --mesh 2x1 --layout dp --devices cpu:2x
expect_fail 3 "--layout config needs the config's distribution: of type model_parallel with a layout_map" -- \
  "$tessera" bench "$work/run.yaml" --mesh 2x1 --layout config --set "distribution={devices: cpu:2, type: auto_tp}"
out=$("$tessera" eval "$work/run.yaml" --checkpoint "$work/sharded_ckpt" --split train)
grep -q "accuracy" <<<"$out" || fail "a sharded checkpoint did not load on one device: $out"

# Bad distributions: errors at the entry, naming the sizes and axes.
expect_fail 3 "the mesh 2x4 has 8 positions but there are 4 devices" -- \
  "$tessera" train "$work/sharded.yaml" --set distribution.mesh.shape="[2, 4]"
expect_fail 3 "layout_map.dense/kernel\[1\]: unknown mesh axis 'modle' (did you mean 'model'?)" -- \
  "$tessera" train "$work/sharded.yaml" --set "distribution.layout_map={dense/kernel: [null, modle]}"
expect_fail 3 "layout_map.dense/kernel: .*'tiny/dense/kernel'.*dimension 0 of size 8.*mesh axis 'model' of size 3" -- \
  "$tessera" train "$work/sharded.yaml" --set distribution.devices=cpu:3 --set distribution.mesh.shape="[1, 3]" \
  --set "distribution.layout_map={dense/kernel: [model, null]}"
expect_fail 3 "unknown distribution type 'data_paralel' (did you mean 'data_parallel'?)" -- \
  "$tessera" train "$work/run.yaml" --set "distribution={type: data_paralel}"
expect_fail 3 "data.train.classes: classes must be >= 2" -- "$tessera" train "$work/run.yaml" --set data.train.classes=1
expect_fail 3 "data.train.samples: samples must be >= 1" -- "$tessera" train "$work/run.yaml" --set data.train.samples=-3
expect_fail 3 "data.train.shape\[0\]: a sample's dimensions must be >= 1" -- \
  "$tessera" train "$work/run.yaml" --set "data.train.shape=[-1]"
# Sizes past what the engine can hold are errors at the entry, not overflow or a crash.
expect_fail 3 "distribution.mesh.shape: a mesh has at most 16 axes, this one 17" -- \
  "$tessera" train "$work/run.yaml" --set "distribution={mesh: {shape: [$(printf '1, %.0s' {1..16})1]}}"
expect_fail 3 "distribution.mesh.shape: the mesh holds more than 2147483647 devices" -- \
  "$tessera" train "$work/sharded.yaml" --set distribution.mesh.shape="[4611686018427387905, 4]"
expect_fail 3 "distribution.mesh.shape: the mesh has 5000 positions; without devices:" -- \
  "$tessera" train "$work/run.yaml" --set "distribution={mesh: {shape: [5000]}}"
expect_fail 3 "distribution.devices: 'cpu:5000' is not cpu:N with N from 1 to 4096" -- \
  "$tessera" train "$work/run.yaml" --set "distribution={devices: 'cpu:5000'}"
expect_fail 3 "distribution.devices: 'cuda:99999999999' is not cuda:all, cuda:I,J" -- \
  "$tessera" train "$work/run.yaml" --set "distribution={devices: 'cuda:99999999999'}"
expect_fail 3 "distribution.batch_dim_name: data_parallel splits batches along the mesh's first axis 'batch'" -- \
  "$tessera" train "$work/run.yaml" --set "distribution={devices: cpu:4, mesh: {shape: [2, 2]}, batch_dim_name: model}"
expect_fail 3 "distribution.collective_timeout_s: collective_timeout_s must be from 0.001" -- \
  "$tessera" train "$work/sharded.yaml" --set distribution.collective_timeout_s=0.0001
expect_fail 3 "distribution.memory_limit: '0.5' is not a size from 1 byte" -- \
  "$tessera" plan "$work/run.yaml" --set "distribution={devices: cpu:4, type: auto, memory_limit: 0.5}"
echo "cli_test: ok"
