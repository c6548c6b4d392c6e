#!/usr/bin/env bash
# Installs Tessera's build dependencies from Debian's packages (Debian 12),
# non-interactively. Runs apt-get as root (directly, or through sudo), and only
# when something is missing, so it is quick to run again.
set -euo pipefail
setup_args="$*"  # repeated in the advice need_root prints

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libdnnl-dev       # oneDNN: the CPU backend's kernels
  ocl-icd-opencl-dev  # oneDNN's CMake package requires OpenCL, which libdnnl-dev only recommends
  libyaml-cpp-dev   # YAML model and run configs
  libfmt-dev        # formatting
  doctest-dev       # the test suites
  libcli11-dev      # the tessera command line (a maintained parser beats a hand-written one)
  nlohmann-json3-dev  # JSON output of inspect/bench and checkpoint headers
  zlib1g-dev        # gzipped IDX datasets and deflated .npz archives
  libopenmpi-dev openmpi-bin  # jobs of several processes: mpirun, and MPI collectives between them
  dataset-fashion-mnist  # the default config's data: /usr/share/datasets/fashion-mnist
  bible-kjv         # the GPT's byte corpus, written to data/kjv.txt below
  python3 procps    # the test scripts: python3 checks outputs, pgrep finds mpirun's ranks
  iproute2          # the multi-host test: hosts as network namespaces joined by veth links
)
# --sanitizers: also Clang with its sanitizer and libFuzzer runtimes
# (scripts/sanitize.sh and scripts/fuzz.sh).
if [ "${1:-}" = --sanitizers ]; then
  packages+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# The King James Bible as plain text (verse references dropped), for the GPT
# configs: made from the installed package, never committed.
make_corpus() {
  local out
  out="$(dirname "$0")/../data/kjv.txt"
  [ -s "$out" ] && return 0
  mkdir -p "$(dirname "$out")"
  bible -f 'Gen1:1-Rev22:21' | sed 's/^[^ ]* //' > "$out.tmp" && mv "$out.tmp" "$out"
  echo "setup: wrote $out ($(wc -c < "$out") bytes)"
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
  make_corpus
  exit 0
fi

# Without root, sudo must be there and allowed (asking for a password only
# where someone can type it); else say the exact command an administrator runs.
need_root() {
  echo "setup: Tessera needs Debian packages that are not installed, and installing them takes root." >&2
  echo "setup: ask an administrator to run (or run as root), then run scripts/setup.sh${setup_args:+ $setup_args} again:" >&2
  echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
}
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || need_root
  if ! sudo -n true 2>/dev/null; then
    [ -t 0 ] || need_root
    sudo -v || need_root
  fi
  as_root=(sudo)
fi
echo "setup: installing ${missing[*]}"
# Through env: sudo's env_reset would drop an exported DEBIAN_FRONTEND.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
make_corpus
