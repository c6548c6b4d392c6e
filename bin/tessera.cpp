// The `tessera` command-line program. Every engine error is caught here and
// mapped to an exit code in one place (see exit_code_for).
#include <chrono>
#include <cmath>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include "backends/registry.hpp"

namespace {

using namespace tessera;

enum ExitCode { kOk = 0, kFailed = 1, kUsage = 2, kBadInput = 3, kUnsupported = 4 };

// Prints the devices and runs one small matmul on each backend, checked
// against a plain loop on the host.
int selfcheck(int cpu_devices) {
  set_cpu_device_count(cpu_devices);
  fmt::print("Tessera self-check\n");
  fmt::print("  CUDA backend compiled: {}\n", cuda_compiled() ? "yes" : "no");
  fmt::print("  devices:");
  for (const auto& d : available_devices()) fmt::print(" {}", d.str());
  fmt::print("\n");
  if (cuda_compiled() && cuda_device_count() == 0)
    fmt::print("  (no GPU found: the CUDA backend is built but has no device to run on)\n");

  const std::int64_t m = 64, k = 96, n = 48;
  std::vector<float> a(m * k), b(k * n), expected(m * n, 0.0f);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.1f * static_cast<float>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.07f * static_cast<float>(i));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p)
      for (std::int64_t j = 0; j < n; ++j) expected[i * n + j] += a[i * k + p] * b[p * n + j];

  Tensor host_a = Tensor::from_vector(a, {m, k}), host_b = Tensor::from_vector(b, {k, n});
  bool ok = true;
  for (const auto& device : available_devices()) {
    Backend& backend = backend_for(device);
    Tensor da = Tensor::empty(host_a.shape(), DType::f32, device);
    Tensor db = Tensor::empty(host_b.shape(), DType::f32, device);
    Tensor dc = Tensor::empty({m, n}, DType::f32, device);
    Tensor host_c = Tensor::empty({m, n}, DType::f32);
    auto start = std::chrono::steady_clock::now();
    backend.copy(host_a, da);
    backend.copy(host_b, db);
    backend.matmul(da, db, nullptr, dc);
    backend.copy(dc, host_c);
    backend.synchronize();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    double max_error = 0;
    auto c = host_c.to_vector<float>();
    for (std::size_t i = 0; i < c.size(); ++i)
      max_error = std::max(max_error, static_cast<double>(std::abs(c[i] - expected[i])));
    bool pass = max_error < 1e-3;
    ok = ok && pass;
    fmt::print("  {:<8} {:<7} matmul {}x{}x{}: max |error| {:.2e}  {:.2f} ms  {}\n", device.str(),
               backend.name(), m, k, n, max_error, ms, pass ? "ok" : "FAILED");
  }
  fmt::print("{}\n", ok ? "self-check passed" : "self-check FAILED");
  return ok ? kOk : kFailed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera: train and run neural networks declared in YAML, sharded across devices"};
  app.require_subcommand(1);
  int cpu_devices = 2;
  auto* check = app.add_subcommand("selfcheck", "Print the devices and run a small matmul on each");
  check->add_option("--cpu-devices", cpu_devices, "Number of logical CPU devices")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    if (*check) return selfcheck(cpu_devices);
  } catch (const tessera::ShapeError& e) {
    std::cerr << "tessera: shape error: " << e.what() << "\n";
    return kBadInput;
  } catch (const tessera::DTypeError& e) {
    std::cerr << "tessera: dtype error: " << e.what() << "\n";
    return kBadInput;
  } catch (const tessera::DeviceError& e) {
    std::cerr << "tessera: device error: " << e.what() << "\n";
    return kBadInput;
  } catch (const tessera::UnsupportedError& e) {
    std::cerr << "tessera: unsupported: " << e.what() << "\n";
    return kUnsupported;
  } catch (const std::exception& e) {
    std::cerr << "tessera: error: " << e.what() << "\n";
    return kFailed;
  }
  return kUsage;
}
