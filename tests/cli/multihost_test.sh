#!/usr/bin/env bash
# Jobs across hosts: 2 hosts x 2 processes, the hosts being network namespaces
# of this machine joined over veth links and a bridge (hosts.sh), mpirun
# entering each through an rsh agent, OpenMPI's TCP transport restricted to
# the hosts' subnet. The MPI collectives suite passes across them; data and
# model parallel training equal one process (losses and weights); a checkpoint
# saved across the hosts reloads in one process on one host; a rank killed or
# stopped on the second host ends the job with an error naming it.
# Without root or network namespaces it exits 77, which ctest reports as
# skipped, saying why.
# Usage: multihost_test.sh TESSERA_BINARY MPI_TEST_BINARY SOURCE_DIR MPIRUN
set -euo pipefail
tessera=$1
mpi_tests=$2
src=$3
hosts_mpirun_binary=$4
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cd "$work"  # a run without a checkpoint folder saves under ./runs: here, not in the build tree
source "$here/lib.sh"
source "$here/hosts.sh"
watchdog "${TESSERA_TEST_WATCHDOG_S:-240}"  # ctest's timeout is 300 s
trap 'kill "$watchdog_pid" 2>/dev/null || true; hosts_down; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

if ! hosts_up 2; then
  echo "skipped: no test hosts on this machine: $hosts_error"
  exit 77
fi
echo "hosts: ${host_name[0]} at ${host_addr[0]}, ${host_name[1]} at ${host_addr[1]}, joined by a bridge (TCP subnet $hosts_subnet.0/24)"

stage "placement"
before=$(host_bytes 1)
hosts_mpirun -np 4 sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"' | sort > "$work/placement.txt"
launch_bytes=$(( $(host_bytes 1) - before ))  # what starting and ending a job of 4 sends over host1's link
[ "$(cat "$work/placement.txt")" = "$(printf '0 host0\n1 host0\n2 host1\n3 host1')" ] ||
  fail "ranks are not 2 per host: $(cat "$work/placement.txt")"

stage "collectives across hosts"
hosts_mpirun -np 4 "$mpi_tests" > "$work/collectives.out" 2>&1 ||
  fail "the MPI collectives suite failed across hosts: $(tail -30 "$work/collectives.out")"
grep "test cases" "$work/collectives.out" | head -1

# 96 samples in batches of 32: three optimizer steps. Each run: one process
# holding the whole mesh, then 2 processes on each host.
cp "$src/configs/tiny_synthetic.yaml" "$work/run.yaml"
three_steps=(--set training.epochs=1 --set data.train.samples=96)
for run in "4x1 data_parallel" "2x2 model_parallel"; do
  set -- $run
  name="$1-$2"
  stage "train $name"
  "$tessera" train "$work/run.yaml" "${three_steps[@]}" --set "$(mesh "$1" "$2")" \
    --set training.checkpoint.dir="$work/$name.one" --log "$work/$name.one.jsonl" > /dev/null
  before=$(host_bytes 1)
  hosts_mpirun -np 4 "$tessera" train "$work/run.yaml" "${three_steps[@]}" --set "$(mesh "$1" "$2")" \
    --set training.checkpoint.dir="$work/$name.hosts" --log "$work/$name.hosts.jsonl" > "$work/$name.out" 2>&1
  crossed=$(( $(host_bytes 1) - before ))
  grep -q "^Distribution: .*4 processes" "$work/$name.out" || fail "$name: not a job of 4: $(cat "$work/$name.out")"
  [ -f "$work/$name.hosts/model.safetensors.index.json" ] || fail "$name: the checkpoint is not sharded: $(cat "$work/$name.out")"
  [ "$crossed" -gt $((launch_bytes + 4096)) ] ||
    fail "$name: $crossed bytes crossed between the hosts, hardly more than a job that only starts ($launch_bytes)"
  same_losses "$work/$name.one.jsonl" "$work/$name.hosts.jsonl"
  "$tessera" export "$work/$name.one" "$work/$name.one.safetensors" > /dev/null
  "$tessera" export "$work/$name.hosts" "$work/$name.hosts.safetensors" > /dev/null
  same_tensors "$work/$name.one.safetensors" "$work/$name.hosts.safetensors" 2e-5
  echo "$name: 4 processes on 2 hosts equal one process (losses, weights); $crossed bytes crossed host1's link" \
       "over TCP ($launch_bytes for a job that only starts)"
done

stage "a checkpoint saved across hosts, loaded on one"
# The model-parallel checkpoint written by the 4 processes of 2 hosts, read by
# one process on one host (on one device, and on the same mesh): the
# predictions of the one-process run's own checkpoint.
sample_inputs "$work/x.npy"
"$tessera" predict "$work/run.yaml" --set distribution=null --checkpoint "$work/2x2-model_parallel.one" \
  --input "$work/x.npy" --output "$work/p-one.csv" > /dev/null
on_host 1 "$tessera" predict "$work/run.yaml" --set distribution=null --checkpoint "$work/2x2-model_parallel.hosts" \
  --input "$work/x.npy" --output "$work/p-hosts.csv" > /dev/null
same_csv "$work/p-one.csv" "$work/p-hosts.csv" 1e-5
on_host 1 "$tessera" predict "$work/run.yaml" --set "$(mesh 2x2 model_parallel)" \
  --checkpoint "$work/2x2-model_parallel.hosts" --input "$work/x.npy" --output "$work/p-hosts-mesh.csv" > /dev/null
same_csv "$work/p-one.csv" "$work/p-hosts-mesh.csv" 1e-5

# A rank of the second host that dies or stops ends the job on both hosts.
stop_rank 3 KILL kill -- hosts_mpirun -np 4
grep -q "process rank 3 .*exited on signal 9" "$work/kill.out" || fail "the error does not name rank 3: $(cat "$work/kill.out")"
stop_rank 2 STOP stop -- hosts_mpirun -np 4
# MPI's collectives do not say who has arrived: a waiting process names every
# other process of the group it waited for, the stopped one among them.
grep -q "collective error: .*waited 3.000 s for processes .*2.*, which did not join" \
  "$work/stop.out" || fail "the timeout does not name process 2: $(cat "$work/stop.out")"
echo "multihost_test: all checks passed"
