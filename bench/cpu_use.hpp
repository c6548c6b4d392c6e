// CpuUse: CPU time used since construction, in cores (CPU seconds per
// second), by this process and by the rest of the machine. Shared by the
// benchmarks.
//
// `self` counts this process and the children it has waited for (a peer run
// through popen/pclose), so `others` is what competed with the benchmark: on a
// shared machine a busy neighbour skews the 2-thread figures far more than the
// 1-thread ones (OpenMP splits the work evenly and waits for the slowest thread).
#pragma once

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <unistd.h>

namespace tessera::bench {

class CpuUse {
 public:
  using Clock = std::chrono::steady_clock;

  CpuUse() : start_(Clock::now()), machine_(machine_ticks()), self_(self_ticks()) {}
  // This process (and its waited-for children), in cores.
  double self() const { return per_second(self_ticks() - self_); }
  // Every other process, in cores.
  double others() const {
    return std::max(0.0, per_second((machine_ticks() - machine_) - (self_ticks() - self_)));
  }

 private:
  double per_second(long long ticks) const {
    double s = std::chrono::duration<double>(Clock::now() - start_).count();
    return s > 0 ? static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK)) / s : 0.0;
  }
  // Busy ticks of all CPUs: user nice system idle iowait irq softirq steal...
  static long long machine_ticks() {
    std::ifstream in("/proc/stat");
    std::string cpu;
    long long v[8] = {};
    in >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7];
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  }
  // utime + stime + cutime + cstime of this process (fields 14 to 17 of
  // /proc/self/stat); the last two grow when a child is waited for.
  static long long self_ticks() {
    std::ifstream in("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream rest(text.substr(text.rfind(')') + 2));
    std::string field;
    long long total = 0;
    for (int i = 3; i <= 17 && rest >> field; ++i)
      if (i >= 14) total += std::stoll(field);
    return total;
  }
  Clock::time_point start_;
  long long machine_, self_;
};

}  // namespace tessera::bench
