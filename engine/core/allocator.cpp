#include "engine/core/allocator.hpp"

#include <sys/sysinfo.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/core/error.hpp"

namespace tessera {

void* Allocator::allocate(std::size_t bytes) {
  void* ptr = raw_allocate(bytes == 0 ? 1 : bytes);
  if (ptr == nullptr)
    throw OutOfMemoryError("out of memory on " + device_.str() + ": " + std::to_string(bytes) +
                " bytes requested, " + std::to_string(bytes_in_use_.load()) + " in use" + limit_note());
  allocations_.fetch_add(1, std::memory_order_relaxed);
  auto in_use = bytes_in_use_.fetch_add(static_cast<std::int64_t>(bytes)) + static_cast<std::int64_t>(bytes);
  auto peak = peak_bytes_.load();
  while (in_use > peak && !peak_bytes_.compare_exchange_weak(peak, in_use)) {
  }
  return ptr;
}

void Allocator::deallocate(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  raw_deallocate(ptr, bytes);
  frees_.fetch_add(1, std::memory_order_relaxed);
  bytes_in_use_.fetch_sub(static_cast<std::int64_t>(bytes));
}

AllocatorStats Allocator::stats() const {
  return {allocations_.load(), frees_.load(), bytes_in_use_.load(), peak_bytes_.load()};
}

namespace {

// RAM and swap together: no allocation larger than this can ever be met.
std::size_t machine_memory_bytes() {
  static const std::size_t bytes = [] {
    struct sysinfo info {};
    if (::sysinfo(&info) != 0) return SIZE_MAX;  // unknown: let the C library decide
    return static_cast<std::size_t>(info.totalram + info.totalswap) * info.mem_unit;
  }();
  return bytes;
}

// What the kernel says it can still give without killing anyone: MemAvailable
// (free memory and the caches it can reclaim) and free swap. SIZE_MAX when
// /proc/meminfo cannot be read.
std::size_t available_memory_bytes() {
  std::FILE* file = std::fopen("/proc/meminfo", "r");
  if (file == nullptr) return SIZE_MAX;
  std::size_t available = 0, swap_free = 0;
  bool found = false;
  char line[256];
  while (std::fgets(line, sizeof line, file) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      available = static_cast<std::size_t>(kib) << 10;
      found = true;
    } else if (std::sscanf(line, "SwapFree: %llu kB", &kib) == 1) {
      swap_free = static_cast<std::size_t>(kib) << 10;
    }
  }
  std::fclose(file);
  return found ? available + swap_free : SIZE_MAX;
}

// Requests this large are also checked against the memory available now:
// under overcommit, several that each fit the machine would all "succeed"
// and the process be killed when their pages are touched. Smaller ones are
// not worth reading /proc/meminfo for.
constexpr std::size_t kCheckAvailableFrom = std::size_t{256} << 20;

}  // namespace

void* CpuAllocator::raw_allocate(std::size_t bytes) {
  constexpr std::size_t kAlignment = 64;
  if (bytes > machine_memory_bytes() || bytes > SIZE_MAX - kAlignment) return nullptr;
  if (bytes >= kCheckAvailableFrom && bytes > available_memory_bytes()) return nullptr;
  return std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
}

void CpuAllocator::raw_deallocate(void* ptr, std::size_t) { std::free(ptr); }

std::string CpuAllocator::limit_note() const {
  const std::size_t total = machine_memory_bytes();
  if (total == SIZE_MAX) return "";
  const std::size_t available = available_memory_bytes();
  return "; this machine has " + std::to_string(total) + " bytes (" + std::to_string(total >> 20) +
         " MiB) of RAM and swap in all" +
         (available == SIZE_MAX ? "" : ", " + std::to_string(available >> 20) + " MiB of them available now");
}

namespace {

// Filled before main (constant-initialized, so it exists before any registrar runs).
constinit AllocatorSource allocator_sources[2] = {nullptr, nullptr};

}  // namespace

void register_allocator_source(DeviceKind kind, AllocatorSource source) {
  allocator_sources[static_cast<int>(kind)] = source;
}

Allocator& device_allocator(Device device) {
  AllocatorSource source = allocator_sources[static_cast<int>(device.kind)];
  if (source == nullptr)
    throw DeviceError("no backend serves " + device.str() + ": link the engine's backends (backends/registry.cpp)");
  return source(device);
}

}  // namespace tessera
