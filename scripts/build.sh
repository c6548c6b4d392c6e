#!/usr/bin/env bash
# Configures (Ninja, Release, ccache when present) and builds Tessera into build/.
# The CUDA backend is compiled whenever a CUDA toolkit is found (TESSERA_CUDA=AUTO);
# pass -DTESSERA_CUDA=OFF to leave it out.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build
