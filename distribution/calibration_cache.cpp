#include "distribution/calibration_cache.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

namespace tessera {
namespace {

std::filesystem::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path base = xdg && *xdg ? xdg : home && *home ? std::filesystem::path(home) / ".cache" : ".";
  return base / "tessera" / "calibration.txt";
}

std::string machine_key() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "?";
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return model + " x" + std::to_string(std::thread::hardware_concurrency());
}

// Speeds finite and positive, a latency finite and not negative, a core or
// more: an edited or damaged file (0, nan, -5) would otherwise price every
// candidate at infinity, NaN or below zero.
bool plausible(const Calibration& c) {
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  return positive(c.matmul_gflops_per_thread) && positive(c.memory_gbps_per_thread) && positive(c.link_gbps) &&
         std::isfinite(c.collective_latency_us) && c.collective_latency_us >= 0 && c.cores >= 1;
}

}  // namespace

Calibration cached_calibration(bool refresh) {
  const auto file = cache_file();
  const std::string key = machine_key();
  if (!refresh) {
    // "name value" lines; anything missing or odd means measuring again.
    std::ifstream in(file);
    std::map<std::string, std::string> fields;
    std::string name;
    while (in >> name) std::getline(in >> std::ws, fields[name]);
    try {
      if (fields.at("machine") == key) {
        const Calibration cached{std::stod(fields.at("matmul_gflops_per_thread")),
                                 std::stod(fields.at("memory_gbps_per_thread")), std::stod(fields.at("link_gbps")),
                                 std::stod(fields.at("collective_latency_us")), std::stoi(fields.at("cores"))};
        if (plausible(cached)) return cached;
      }
    } catch (const std::exception&) {
    }
  }
  Calibration c = measure_calibration();
  std::error_code ignored;  // a read-only home only costs the next run a probe
  std::filesystem::create_directories(file.parent_path(), ignored);
  {
    std::ofstream out(file.string() + ".tmp");
    out << "machine " << key << "\nmatmul_gflops_per_thread " << c.matmul_gflops_per_thread
        << "\nmemory_gbps_per_thread " << c.memory_gbps_per_thread << "\nlink_gbps " << c.link_gbps
        << "\ncollective_latency_us " << c.collective_latency_us << "\ncores " << c.cores << "\n";
    if (!out) return c;
  }
  std::filesystem::rename(file.string() + ".tmp", file, ignored);
  return c;
}

}  // namespace tessera
