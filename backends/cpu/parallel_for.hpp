// parallel_for: body(i) for i in [0, n), spread over this thread's OpenMP team
// where `parallel` says so, else run on this thread alone.
//
// Not `#pragma omp parallel for if (...)`: for a false clause libgomp (GCC
// 12) still starts a team of one, a futex call each time: 1.1-1.4 us on a
// 2-vCPU Zen 5 VM against about 2 ns for a branch, which a decode step of
// many small ops pays per op (bench/README.md, "Serial loops without a team").
#pragma once

#include <cstdint>

namespace tessera {

template <typename Body>
void parallel_for(std::int64_t n, bool parallel, Body&& body) {
  if (!parallel || n <= 1) {
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace tessera
