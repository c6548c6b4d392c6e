#include "backends/cpu/bf16_rounding.hpp"

#include "backends/cpu/vector_math.hpp"

namespace tessera {
namespace {

[[gnu::target("avx512f")]] void round_to_bf16_avx512(const float* from, bf16* to, std::int64_t n) {
  round_to_bf16_in_lanes<64>(from, to, n);
}

[[gnu::target("avx2")]] void round_to_bf16_avx2(const float* from, bf16* to, std::int64_t n) {
  round_to_bf16_in_lanes<32>(from, to, n);
}

void round_to_bf16_sse(const float* from, bf16* to, std::int64_t n) { round_to_bf16_in_lanes<16>(from, to, n); }

}  // namespace

void round_to_bf16(const float* from, bf16* to, std::int64_t n) {
  static const auto kernel = widest_vector_isa() == VectorIsa::avx512 ? round_to_bf16_avx512
                             : widest_vector_isa() == VectorIsa::avx2 ? round_to_bf16_avx2
                                                                      : round_to_bf16_sse;
  kernel(from, to, n);
}

}  // namespace tessera
