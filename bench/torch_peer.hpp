// The PyTorch peer of the benchmarks, found and set up to run at its best on
// this machine (shared/REFERENCE_MODELS.md says how, and why):
//
// - Debian's /usr/bin/python3 with python3-torch, and LD_LIBRARY_PATH at the
//   openblas-openmp folder of libopenblas0-openmp (alone, Debian's torch
//   links the reference BLAS, 25-40x slower);
// - OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, unless OpenBLAS picks a core
//   type without the widest vector unit this CPU has (0.3.21 falls back to
//   "Prescott" on CPUs it does not know): then OPENBLAS_CORETYPE names the
//   matching one, SkylakeX for AVX-512, Haswell for AVX2;
// - GLIBC_TUNABLES set so that glibc's malloc keeps the memory PyTorch frees
//   (kKeepFreedMemory), as the jemalloc or tcmalloc that PyTorch's CPU
//   tuning guides preload would: by default glibc gives large freed blocks
//   back to the kernel (mapped ones, and the heap's top past its trim
//   threshold), so a step's activations page-fault in anew, which in some
//   VMs costs more than the arithmetic;
// - its own sgemm speed measured, so that a benchmark can set it against the
//   FMA peak and refuse a comparison with a peer that runs far below it.
//
//   TorchPeer peer = TorchPeer::find("/usr/bin/python3", source_dir / "bench", {1, 2});
//   if (peer.available) run_command(peer.command("torch_models.py") + " --models mlp");
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::bench {

class TorchPeer {
 public:
  // Finds the peer (`scripts` holds torch_env.py and the peers' scripts) and
  // measures its sgemm at each of `sgemm_threads`.
  static TorchPeer find(const std::string& python, const std::filesystem::path& scripts,
                        const std::vector<int>& sgemm_threads);

  bool available = false;
  std::string why;  // when unavailable: what is missing and how to install it
  std::string torch_version, blas;
  std::string openblas_core;  // the core type OpenBLAS picked by itself ("Zen", "Prescott")
  std::string core_override;  // OPENBLAS_CORETYPE given to the peer, or "" (its own pick is right)
  std::map<int, double> sgemm_gflops;  // threads -> torch.mm 1024^3, when measured

  // The shell command that runs `script` (in the scripts' folder) as the peer.
  std::string command(const std::string& script) const;
  // One line for a benchmark's header: version, BLAS, core type.
  std::string describe() const;

 private:
  std::string env_;  // env ... LD_LIBRARY_PATH=... GLIBC_TUNABLES=... [OPENBLAS_CORETYPE=...]
  std::string tunables_;  // the peer's GLIBC_TUNABLES: the caller's, then kKeepFreedMemory
  std::string python_;
  std::filesystem::path scripts_;
};

// glibc's malloc for the peer: blocks up to 32 MiB (the largest threshold it
// takes) from its heap, which it never trims. On a 2-vCPU Zen 5 VM
// (2026-12-07), bench/torch_models.py's training steps took 0.41-0.83x
// their time with it on one thread and 0.68-1.03x on two (the CNN's
// two-thread step alike both ways, the GPT's 118-126 ms against 148-185):
// there oneDNN's reorders into freshly mapped activations ran at 0.5 GB/s.
inline constexpr const char* kKeepFreedMemory =
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=68719476736";

// A peer whose GEMM runs under this share of the measured FMA peak is broken
// on this machine: a comparison with it is a failed measurement, never a win.
inline constexpr double kPeerGemmFloor = 0.60;

// Runs `command` through the shell; its output (stdout and stderr) and exit status.
std::pair<std::string, int> run_command(const std::string& command);
// The lines of `text` that are JSON objects, parsed.
std::vector<nlohmann::json> json_lines(const std::string& text);
// The last non-empty line of `text`.
std::string last_line(const std::string& text);
std::string shell_quote(const std::string& s);

}  // namespace tessera::bench
