// A convolution's weight gradient as GEMMs over im2col'd bands of the input,
// for CPUs where oneDNN 2.6's own backward-weights kernel is slow.
//
// dw[KH, KW, C, F] is the product col^T dy summed over the batch, where a
// band of output rows of one image gives col[rows, KH*KW*C] (each row: the
// input window under one output position) and dy[rows, F]. Each thread takes
// whole bands, lays one out at a time in a buffer of its own (about an
// image's worth, read back from cache), multiplies it with one-threaded sgemm
// into a partial sum of its own, and the partials are added at the end. On a
// Zen 1 (AVX2, where oneDNN runs its generic jit:avx2 backward weights) the
// reference CNN's weight gradients took 42.0 ms a training step instead of
// 51.5 on one thread, 23.7 instead of 27.6 on two (bench/README.md,
// "Convolution weight gradients on AVX2").
#pragma once

#include <cstddef>

#include "backends/op_args.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

// Whether the GEMM path is the faster one for x[N, H, W, C], dy[N, OH, OW, F]
// and dw[KH, KW, C, F] on `threads` threads of this CPU: f32, a window of at
// least 64 inputs (KH*KW*C; below that the product is too thin for sgemm),
// enough bands to give every thread one, and oneDNN running its AVX2 kernels
// (on AVX-512 its direct kernels are the faster ones).
bool conv_weights_through_gemm(DType dtype, const Shape& x, const Shape& dy, const Shape& dw, int threads);

// Floats of scratch that conv2d_backward_weights_gemm needs.
std::size_t conv_weights_gemm_scratch(const Shape& x, const Shape& dy, const Shape& dw, int threads);

// dw (and db, the sum of dy over N, OH, OW, when not null) from x and dy, on
// `threads` OpenMP threads, with `scratch` of conv_weights_gemm_scratch floats.
void conv2d_backward_weights_gemm(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor* db,
                                  const Conv2dArgs& args, float* scratch, int threads);

}  // namespace tessera
