// Denormal floats: flushed to zero in every CPU kernel, unless switched off.
//
// Floats below 1.18e-38 in magnitude (denormals) take a microcoded path on x86
// that costs tens to hundreds of cycles per operation. Training makes them:
// small gradients, Adam's decaying moments, weights pushed toward zero. The
// default MLP ran at half speed from its second epoch because of them. So
// every CPU kernel runs with the MXCSR bits flush-to-zero (FTZ: denormal
// results become 0) and denormals-are-zero (DAZ: denormal inputs read as 0)
// set, on the thread that calls the kernel and on the OpenMP threads that help
// it, as TensorFlow's thread pools do. (PyTorch leaves it to the user:
// torch.set_flush_denormal(True).)
//
// The calling thread's own mode is restored when the kernel returns, so an
// embedder's code between engine calls keeps IEEE denormals. The OpenMP
// threads of the engine's kernels keep the engine's mode.
//
// set_flush_denormals(false) opts out for the whole process (call it before or
// between runs; kernels running at that moment keep the mode they started
// with). On CPUs other than x86-64 it changes nothing: the mode is the
// platform's default.
#pragma once

namespace tessera {

bool flush_denormals();             // true by default
void set_flush_denormals(bool on);  // process-wide

// Sets (flush = true) or clears FTZ and DAZ on this thread for the object's
// lifetime, then puts the thread's previous FTZ and DAZ back (exception flags
// raised meanwhile stay raised, as they would without it).
class DenormalMode {
 public:
  explicit DenormalMode(bool flush);
  ~DenormalMode();
  DenormalMode(const DenormalMode&) = delete;
  DenormalMode& operator=(const DenormalMode&) = delete;

 private:
  unsigned previous_;
  bool changed_ = false;
};

// Sets or clears FTZ and DAZ on this thread for good.
void set_thread_denormal_mode(bool flush);

// Whether this thread flushes denormals now (FTZ and DAZ both set).
bool thread_flushes_denormals();

}  // namespace tessera
