// The doctest runner. Tests that need a GPU form the test suite "gpu" and are
// skipped in a plain run; `--gpu-suite` runs exactly them, or exits with 77
// (CTest's "Skipped") when no GPU is found. The other test cases are registered
// with CTest one by one (tests/CMakeLists.txt); a run whose --test-case
// filter selects no test case fails, so that an entry can never pass empty
// (a ';' in a test name once split entries into filters matching nothing).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "backends/registry.hpp"

namespace {

// Counts the test cases that start; a listener sees every run.
struct StartedTestCases : doctest::IReporter {
  static inline int count = 0;
  explicit StartedTestCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++count; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("started_test_cases", 1, StartedTestCases);

bool names_test_cases(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--test-case=", 12) == 0 || std::strncmp(argv[i], "-tc=", 4) == 0) return true;
  return false;
}

}  // namespace

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
  const int result = context.run();
  if (result == 0 && !context.shouldExit() && names_test_cases(argc, argv) && StartedTestCases::count == 0) {
    std::fprintf(stderr, "no test case matches the --test-case filter: a renamed test, or a name CTest split\n");
    return 1;
  }
  return result;
}
