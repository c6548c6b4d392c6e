// Runs a task once per rank, each on its own thread, as the devices of a mesh
// call a collective together: for the communicator tests.
#pragma once

#include <exception>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

namespace tessera::test {

// Runs fn(rank) on one thread per rank; returns each rank's error message ("" when none).
template <typename F>
std::vector<std::string> on_ranks(int n, F fn) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("[") + typeid(e).name() + "] " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace tessera::test
