// Binary ops with NumPy broadcasting: plain loops (oneDNN's binary primitive
// only broadcasts its second operand).
#include <algorithm>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/strided_loop.hpp"

namespace tessera {
namespace {

float load(const float* p, std::int64_t i) { return p[i]; }
float load(const bf16* p, std::int64_t i) { return to_f32(p[i]); }
void store(float* p, std::int64_t i, float v) { p[i] = v; }
void store(bf16* p, std::int64_t i, float v) { p[i] = to_bf16(v); }

template <typename T, typename F>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  std::vector<std::int64_t> strides[2] = {broadcast_strides(a.shape(), out.shape()),
                                          broadcast_strides(b.shape(), out.shape())};
  for_each_row<2>(out.shape(), strides,
                  [&](std::int64_t o, const std::int64_t* off, std::int64_t n, const std::int64_t* s) {
                    for (std::int64_t i = 0; i < n; ++i)
                      store(po, o + i, f(load(pa, off[0] + i * s[0]), load(pb, off[1] + i * s[1])));
                  });
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::add: return binary_loop<T>(a, b, out, [](float x, float y) { return x + y; });
    case BinaryOp::sub: return binary_loop<T>(a, b, out, [](float x, float y) { return x - y; });
    case BinaryOp::mul: return binary_loop<T>(a, b, out, [](float x, float y) { return x * y; });
    case BinaryOp::div: return binary_loop<T>(a, b, out, [](float x, float y) { return x / y; });
    case BinaryOp::max: return binary_loop<T>(a, b, out, [](float x, float y) { return std::max(x, y); });
    case BinaryOp::min: return binary_loop<T>(a, b, out, [](float x, float y) { return std::min(x, y); });
    case BinaryOp::equal: return binary_loop<T>(a, b, out, [](float x, float y) { return x == y ? 1.0f : 0.0f; });
    case BinaryOp::greater: return binary_loop<T>(a, b, out, [](float x, float y) { return x > y ? 1.0f : 0.0f; });
  }
}

}  // namespace

void CpuBackend::run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  KernelScope scope(threads());
  switch (a.dtype()) {
    case DType::f32: return binary_typed<float>(op, a, b, out);
    case DType::bf16: return binary_typed<bf16>(op, a, b, out);
    default:
      throw UnsupportedError("binary " + std::string(tessera::name(op)) + ": dtype " +
                             std::string(dtype_name(a.dtype())) + " is not supported on " +
                             device().str() + " (f32 and bf16 are)");
  }
}

}  // namespace tessera
