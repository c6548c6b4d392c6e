#!/usr/bin/env bash
# Gathers what scripts/gpu-check.sh needs on a GPU machine that has CUDA 13 and
# PyTorch but none of Tessera's other dependencies, and reaches no package
# registry: the binaries, built here with CUDA code for sm_80 and sm_90, and
# every shared library they load that such a machine lacks, in gpu-kit/ at the
# repository root (git ignores it; under 60 MiB, so that it travels beside the
# working tree; its big files gzipped). cuBLAS, cuBLASLt and NCCL are hundreds of MB and come from the
# GPU machine's CUDA toolkit or PyTorch's wheels; the kit holds stubs of them
# (their symbols, each failing) so that its binaries also load, and its CPU
# half runs, where they are absent.
#
#   scripts/gpu-kit.sh           # build (scripts/build.sh), then fill gpu-kit/
#   scripts/gpu-kit.sh --prove   # then run gpu-check.sh --cpu-only from the kit
#                                # in a bare Debian 12 (as root; about 5 minutes)
#   scripts/gpu-kit.sh --no-build --build-dir DIR --out KIT   # from a finished build (the tests')
set -euo pipefail
cd "$(dirname "$0")/.."
kit=gpu-kit build_dir=build build=1 prove=0
max_mib=60
while [ $# -gt 0 ]; do
  case $1 in
    --prove) prove=1 ;;
    --no-build) build=0 ;;
    --build-dir) build_dir=$2; shift ;;
    --out) kit=$2; shift ;;
    *) echo "gpu-kit: unknown option '$1' (--prove, --no-build, --build-dir DIR, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done

command -v nvcc >/dev/null || { echo "gpu-kit: no CUDA toolkit here (nvcc is not on PATH): a kit needs the CUDA backend compiled" >&2; exit 1; }
[ $build -eq 0 ] || scripts/build.sh >/dev/null
"$build_dir/tessera" devices | grep -q "CUDA backend compiled: yes" ||
  { echo "gpu-kit: $build_dir/tessera was built without the CUDA backend (TESSERA_CUDA=OFF?)" >&2; exit 1; }
# Only an earlier kit (or nothing) is replaced.
if [ -e "$kit" ] && [ ! -f "$kit/MANIFEST" ] && [ -n "$(ls -A "$kit")" ]; then
  echo "gpu-kit: $kit exists and holds no kit (no MANIFEST): not replacing it" >&2
  exit 1
fi

rm -rf "$kit"
mkdir -p "$kit/bin" "$kit/lib" "$kit/stubs"
# bench_gpu when the build has it (gpu-check.sh skips the benchmarks without it).
for binary in "$build_dir/tessera" "$build_dir/tests/tessera_tests" "$build_dir/bench/bench_gpu"; do
  [ -e "$binary" ] || [ "$(basename "$binary")" = bench_gpu ] || { echo "gpu-kit: $binary is missing: build first" >&2; exit 1; }
  [ -e "$binary" ] || continue
  strip --strip-debug -o "$kit/bin/$(basename "$binary")" "$binary"  # symbols stay: gpu-check prints stacks
done

# Every machine has the C and C++ runtimes; the GPU machine has the CUDA
# libraries too big to carry. The rest is copied.
base='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so'
too_big='^(libcublas|libcublasLt|libnccl)\.so'
ldd "$kit"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $base || $name =~ $too_big ]] || cp -L "$path" "$kit/lib/$name"
  done

# A stub of each too-big library: the symbols the binaries take from it, each
# returning an error status (a string for the *String/*Name ones), under the
# library's soname and symbol version.
make_stub() {
  local soname=$1 prefix=$2 versioned=$3 source symbols
  source=$(mktemp --suffix=.c)
  symbols=$(nm -D --undefined-only "$kit"/bin/* | awk '{print $2}' | sed 's/@.*//' | grep -E "^$prefix" | sort -u)
  [ -n "$symbols" ] || { rm -f "$source"; return 0; }
  {
    echo "/* Stub of $soname made by scripts/gpu-kit.sh: every call fails. */"
    for s in $symbols; do
      case $s in
        *String | *Name) echo "const char* $s(void) { return \"$soname is a stub: the real library was not found\"; }" ;;
        *) echo "int $s(void) { return 1; }" ;;
      esac
    done
  } >"$source"
  local version_flags=()
  if [ "$versioned" = yes ]; then
    printf '%s { global: %s; local: *; };\n' "$soname" "$(echo $symbols | sed 's/ /; /g')" >"$source.map"
    version_flags=("-Wl,--version-script=$source.map")
  fi
  cc -shared -fPIC -o "$kit/stubs/$soname" -Wl,-soname,"$soname" "${version_flags[@]}" "$source"
  rm -f "$source" "$source.map"
}
# cuBLAS versions its symbols (cublasCreate_v2@libcublas.so.13); NCCL does not.
# awk reads to the end: an early exit would kill ldd with SIGPIPE, failing the pipeline.
soname() { ldd "$kit"/bin/* | awk -v want="^$1[.]so" '$1 ~ want && !found {print $1; found = 1}'; }
cublas_so=$(soname libcublas) cublaslt_so=$(soname libcublasLt) nccl_so=$(soname libnccl)
make_stub "$cublaslt_so" 'cublasLt' yes
make_stub "$cublas_so" 'cublas[^L]' yes
make_stub "$nccl_so" 'nccl' no

# Files over 4 MiB travel gzipped (oneDNN: 39 MiB, 11 gzipped); gpu-check.sh
# unpacks them. gzip is on every Debian and Ubuntu machine.
find "$kit/bin" "$kit/lib" -type f -size +4M -exec gzip -6 {} +

{
  echo "Tessera GPU kit, made by scripts/gpu-kit.sh"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  echo "source: $(pwd)"  # the tests read configs and models from here
  echo "made: $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "CUDA: $(nvcc --version | grep -o 'release [0-9.]*'), code for $(grep -oE -- '--generate-code=arch=compute_[0-9]+' "$build_dir/build.ninja" | sort -u | sed 's/.*compute_/sm_/' | paste -sd' ') (and their PTX)"
  echo "from the GPU machine: $cublas_so, $cublaslt_so, $nccl_so (stubs in stubs/ stand in where they are absent)"
  echo
  (cd "$kit" && find bin lib stubs -type f -printf '%s\t%p\n' | sort -k2 | awk -F'\t' '{printf "%9.1f KiB  %s\n", $1 / 1024, $2}')
} >"$kit/MANIFEST"

bytes=$(du -sb "$kit" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1048576}')
if [ "$bytes" -gt $((max_mib * 1048576)) ]; then
  echo "gpu-kit: $kit is $mib MiB, over the $max_mib MiB it may take (the device machine takes 64 MiB with the working tree)" >&2
  exit 1
fi
echo "gpu-kit: $kit is ready: $mib MiB, $(find "$kit" -type f | wc -l) files ($kit/MANIFEST lists them)"
echo "gpu-kit: on a GPU machine, from the repository root: scripts/gpu-check.sh"

if [ $prove -eq 1 ]; then
  # fresh-debian-check clones HEAD, which has no build output: the kit enters
  # the chroot through /dev/shm (the chroot mounts the host's /dev).
  shm=$(mktemp -d /dev/shm/tessera-gpu-kit.XXXXXX)
  trap 'rm -rf "$shm"' EXIT
  cp -a "$kit" "$shm/kit"
  ../shared/tools/fresh-debian-check -- bash -c "cp -a $shm/kit gpu-kit && scripts/gpu-check.sh --cpu-only"
fi
