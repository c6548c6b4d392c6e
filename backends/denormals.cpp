#include "backends/denormals.hpp"

#include <atomic>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define TESSERA_HAVE_MXCSR 1
#else
#define TESSERA_HAVE_MXCSR 0
#endif

namespace tessera {
namespace {

std::atomic<bool> g_flush{true};

#if TESSERA_HAVE_MXCSR
constexpr unsigned kFlushToZero = 0x8000;      // MXCSR.FTZ
constexpr unsigned kDenormalsAreZero = 0x0040; // MXCSR.DAZ
constexpr unsigned kBits = kFlushToZero | kDenormalsAreZero;
unsigned read_mode() { return _mm_getcsr(); }
void write_mode(unsigned mode) { _mm_setcsr(mode); }
#else
constexpr unsigned kBits = 0;
unsigned read_mode() { return 0; }
void write_mode(unsigned) {}
#endif

}  // namespace

bool flush_denormals() { return g_flush.load(std::memory_order_relaxed); }
void set_flush_denormals(bool on) { g_flush.store(on, std::memory_order_relaxed); }

DenormalMode::DenormalMode(bool flush) : previous_(read_mode()) {
  unsigned wanted = flush ? (previous_ | kBits) : (previous_ & ~kBits);
  changed_ = wanted != previous_;
  if (changed_) write_mode(wanted);
}

DenormalMode::~DenormalMode() {
  if (changed_) write_mode((read_mode() & ~kBits) | (previous_ & kBits));
}

void set_thread_denormal_mode(bool flush) {
  unsigned mode = read_mode();
  write_mode(flush ? (mode | kBits) : (mode & ~kBits));
}

bool thread_flushes_denormals() { return kBits != 0 && (read_mode() & kBits) == kBits; }

}  // namespace tessera
