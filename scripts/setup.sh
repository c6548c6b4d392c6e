#!/usr/bin/env bash
# Installs Tessera's build dependencies from Debian's packages (Debian 12),
# non-interactively. Runs apt-get as root (directly, or through sudo), and only
# when something is missing, so it is quick to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libdnnl-dev       # oneDNN: the CPU backend's kernels
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
)

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

echo "setup: installing ${missing[*]}"
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
# Through env: sudo's env_reset would drop an exported DEBIAN_FRONTEND.
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
make_corpus
