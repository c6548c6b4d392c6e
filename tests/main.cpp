// The doctest runner. Tests that need a GPU form the test suite "gpu" and are
// skipped in a plain run; `--gpu-suite` runs exactly them, or exits with 77
// (CTest's "Skipped") when no GPU is found. The other test cases are registered
// with CTest one by one (tests/CMakeLists.txt).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "backends/registry.hpp"

int main(int argc, char** argv) {
  doctest::Context context;
  bool gpu_suite = argc > 1 && std::strcmp(argv[1], "--gpu-suite") == 0;
  if (gpu_suite) {
    if (tessera::cuda_device_count() == 0) {
      std::printf("skipped: no GPU found (CUDA backend compiled: %s)\n",
                  tessera::cuda_compiled() ? "yes" : "no");
      return 77;
    }
    context.addFilter("test-suite", "gpu");
    context.setOption("no-skip", true);
    context.applyCommandLine(argc - 1, argv + 1);
  } else {
    context.applyCommandLine(argc, argv);
  }
  return context.run();
}
