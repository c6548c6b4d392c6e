// Device memory allocators with counters.
//
// Every byte a tensor owns comes from the allocator of its device, so tests and
// `tessera inspect` can count allocations (a steady-state training step makes
// none: the executor plans one arena up front).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/device.hpp"

namespace tessera {

struct AllocatorStats {
  std::int64_t allocations = 0;   // calls to allocate()
  std::int64_t frees = 0;         // calls to deallocate()
  std::int64_t bytes_in_use = 0;  // allocated and not yet freed
  std::int64_t peak_bytes = 0;    // high-water mark of bytes_in_use
};

class Allocator {
 public:
  explicit Allocator(Device device) : device_(device) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns memory aligned to at least 64 bytes; throws Error on exhaustion,
  // naming the device and the bytes asked for.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes);

  Device device() const { return device_; }
  AllocatorStats stats() const;
  // Starts a new high-water mark at the bytes in use now (to measure one phase).
  void reset_peak() { peak_bytes_.store(bytes_in_use_.load()); }

 protected:
  virtual void* raw_allocate(std::size_t bytes) = 0;  // nullptr when out of memory
  virtual void raw_deallocate(void* ptr, std::size_t bytes) = 0;
  // Appended to the out-of-memory message: a limit of this allocator's own ("", none).
  virtual std::string limit_note() const { return ""; }

 private:
  Device device_;
  std::atomic<std::int64_t> allocations_{0}, frees_{0}, bytes_in_use_{0}, peak_bytes_{0};
};

// Host memory for the logical CPU devices, 64-byte aligned (a cache line, and
// what AVX-512 loads like). A request larger than the machine's RAM and swap
// together is refused without asking the C library: under overcommit it
// would "succeed" and the process be killed when the pages are touched, and
// under AddressSanitizer it aborts. So is one of 256 MiB or more that exceeds
// the memory available now (several that each fit would overcommit together).
// Memory allocated but not yet touched does not count as used there.
class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(Device device) : Allocator(device) {}

 protected:
  void* raw_allocate(std::size_t bytes) override;
  void raw_deallocate(void* ptr, std::size_t bytes) override;
  std::string limit_note() const override;
};

// The allocator table: where Tensor::empty finds a device's allocator without
// knowing the backends above it (as PyTorch's c10 keeps one per device type).
// The backends' registry fills it, one source per device kind, before main.
using AllocatorSource = Allocator& (*)(Device);
void register_allocator_source(DeviceKind kind, AllocatorSource source);
// The allocator of `device`; throws DeviceError when no backend registered its kind.
Allocator& device_allocator(Device device);

}  // namespace tessera
