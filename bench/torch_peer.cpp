#include "bench/torch_peer.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <set>

#include <fmt/core.h>

namespace tessera::bench {
namespace {

constexpr const char* kInstallHint = "apt-get install python3-torch libopenblas0-openmp";

// The openblas-openmp folder that libopenblas0-openmp installs, or "".
std::string openblas_openmp_dir() {
  auto [listing, status] = run_command("dpkg -L libopenblas0-openmp");
  if (status != 0) return "";
  std::size_t pos = 0;
  while (pos < listing.size()) {
    std::size_t end = listing.find('\n', pos);
    if (end == std::string::npos) end = listing.size();
    std::filesystem::path file = listing.substr(pos, end - pos);
    pos = end + 1;
    std::string name = file.filename().string();
    if (file.parent_path().filename() == "openblas-openmp" &&
        (name.rfind("libblas.so", 0) == 0 || name.rfind("libopenblas", 0) == 0))
      return file.parent_path().string();
  }
  return "";
}

// "Core: Zen" as OpenBLAS prints it with OPENBLAS_VERBOSE=2, or "".
std::string reported_core(const std::string& output) {
  std::size_t at = output.find("Core: ");
  if (at == std::string::npos) return "";
  std::size_t end = output.find('\n', at);
  return output.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
}

// The core type to name when OpenBLAS' own pick lacks the CPU's widest
// vector unit (a generic fallback on a CPU that 0.3.21 does not know), else "".
std::string core_to_name(const std::string& picked) {
  static const std::set<std::string> avx512_cores{"SkylakeX", "Cooperlake", "CooperLake", "SapphireRapids"};
  static const std::set<std::string> avx2_cores{"Haswell", "Zen", "SkylakeX", "Cooperlake", "CooperLake",
                                                "SapphireRapids"};
  __builtin_cpu_init();
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512 && !avx512_cores.contains(picked)) return "SkylakeX";
  if (!avx512 && avx2 && !avx2_cores.contains(picked)) return "Haswell";
  return "";
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::pair<std::string, int> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"cannot start: " + command, -1};
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  int status = pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::vector<nlohmann::json> json_lines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.front() == '{') {
      auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded()) out.push_back(std::move(j));
    }
    pos = end + 1;
  }
  return out;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  std::size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

std::string TorchPeer::command(const std::string& script) const {
  return env_ + " " + shell_quote(python_) + " " + shell_quote((scripts_ / script).string());
}

std::string TorchPeer::describe() const {
  std::string core = openblas_core.empty() ? "core type not reported" : "OpenBLAS core " + openblas_core;
  if (!core_override.empty())
    core += fmt::format(" (a generic fallback on this CPU: run with OPENBLAS_CORETYPE={})", core_override);
  return fmt::format("PyTorch {} ({}), BLAS {}, {}; freed memory kept (GLIBC_TUNABLES={})", torch_version, python_,
                     blas, core, tunables_);
}

TorchPeer TorchPeer::find(const std::string& python, const std::filesystem::path& scripts,
                          const std::vector<int>& sgemm_threads) {
  TorchPeer peer;
  peer.python_ = python;
  peer.scripts_ = scripts;
  if (!std::filesystem::exists(scripts / "torch_env.py")) {
    peer.why = (scripts / "torch_env.py").string() + " not found (set --source-dir)";
    return peer;
  }
  if (access(python.c_str(), X_OK) != 0) {
    peer.why = python + " not found; install PyTorch with: " + kInstallHint;
    return peer;
  }
  std::string blas_dir = openblas_openmp_dir();
  if (blas_dir.empty()) {
    peer.why = "libopenblas0-openmp is not installed (without it Debian's torch runs the reference "
               "BLAS, 25-40x slower); install with: " + std::string(kInstallHint);
    return peer;
  }
  std::string library_path = blas_dir;
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old != nullptr && *old != '\0')
    library_path += std::string(":") + old;
  // A caller's own tunables stay; ours come last, and glibc takes the last
  // value of a key.
  peer.tunables_ = kKeepFreedMemory;
  if (const char* old = std::getenv("GLIBC_TUNABLES"); old != nullptr && *old != '\0')
    peer.tunables_ = std::string(old) + ":" + peer.tunables_;
  peer.env_ = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE LD_LIBRARY_PATH=" + shell_quote(library_path) +
              " GLIBC_TUNABLES=" + shell_quote(peer.tunables_);

  // Which core OpenBLAS picks by itself; name a better one where it fell back.
  auto [output, status] = run_command("OPENBLAS_VERBOSE=2 " + peer.command("torch_env.py"));
  auto lines = json_lines(output);
  if (status != 0 || lines.empty()) {
    std::string said = last_line(output);
    peer.why = python + ": " + (said.empty() ? "cannot import torch" : said) + "; install with: " + kInstallHint;
    return peer;
  }
  peer.torch_version = lines[0].value("torch", "?");
  for (const auto& lib : lines[0].value("blas", std::vector<std::string>{}))
    peer.blas += (peer.blas.empty() ? "" : ", ") + lib;
  if (peer.blas.find("openblas") == std::string::npos) {
    peer.why = "torch did not load OpenBLAS from " + blas_dir + " (BLAS: " + peer.blas +
               "), so it would run the reference BLAS; check libopenblas0-openmp";
    return peer;
  }
  peer.openblas_core = reported_core(output);
  peer.core_override = core_to_name(peer.openblas_core);
  if (!peer.core_override.empty()) peer.env_ += " OPENBLAS_CORETYPE=" + peer.core_override;

  if (!sgemm_threads.empty()) {
    std::string list;
    for (int t : sgemm_threads) list += (list.empty() ? "" : ",") + std::to_string(t);
    auto [sgemm_output, sgemm_status] = run_command(peer.command("torch_env.py") + " --sgemm " + list);
    for (const auto& j : json_lines(sgemm_output))
      if (j.contains("sgemm_gflops")) peer.sgemm_gflops[j.value("threads", 0)] = j.value("sgemm_gflops", 0.0);
    if (sgemm_status != 0) {
      peer.why = "torch_env.py --sgemm failed: " + last_line(sgemm_output);
      return peer;
    }
  }
  peer.available = true;
  return peer;
}

}  // namespace tessera::bench
