// A convolution's weight gradient as register-tiled outer products read
// straight from x and dy, for CPUs with AVX-512.
//
// dw[KH, KW, C, F] seen as [window, F] (window = KH*KW*C) is the sum over
// output positions p of x's window under p (a column of `window` inputs)
// times dy's row at p (F outputs). A tile of 6 window rows by 64 outputs
// lives in 24 registers while a run of positions streams past it: per
// position, 4 vectors of dy and 6 broadcast inputs feed 24 FMAs. Nothing is
// copied (no im2col), except x with its padding laid out, for padded
// convolutions. Threads take runs of output rows; each sums into its own
// [window, F] partial, and the partials are added at the end.
//
// On a 2-vCPU Zen 5 (2026-11-29) the reference CNN's second convolution
// (x [64, 26, 26, 32], dy [64, 24, 24, 64]) took 6.0 ms on one thread and
// 3.0 on two (86% of the FMA peak), against oneDNN 2.6's AVX-512 kernel's 8.1
// and 4.1 and the sgemm-over-im2col path's (conv2d_weights_gemm.hpp) 7.4 and
// 3.8, operands cold.
#pragma once

#include <cstddef>

#include "backends/op_args.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

// Whether this path runs x[N, H, W, C], dy[N, OH, OW, F] and dw[KH, KW, C, F]
// of `dtype` (all three): f32, F a multiple of 16 (whole vectors), and a CPU
// with AVX-512.
bool conv_weights_direct(DType dtype, const Shape& dw);

// Floats of scratch that conv2d_backward_weights_direct needs (through_relu:
// with a relu_output).
std::size_t conv_weights_direct_scratch(const Shape& x, const Shape& dy, const Shape& dw, const Conv2dArgs& args,
                                        int threads, bool through_relu = false);

// dw (and db, the sum of dy over N, OH, OW, when not null) from x and dy, on
// `threads` OpenMP threads, with `scratch` of conv_weights_direct_scratch
// floats. With `relu_output` (laid out as dy), dy is the gradient at that
// ReLU's output and is taken through it as the ReLU's gradient takes it
// (dy * 0 where relu_output <= 0, so a NaN or inf there gives NaN), a run
// of rows at a time into a buffer of each thread's, in cache while the
// tiles read it.
void conv2d_backward_weights_direct(const Tensor& x, const Tensor& dy, const Tensor& dw, const Tensor* db,
                                    const Conv2dArgs& args, float* scratch, int threads,
                                    const Tensor* relu_output = nullptr);

}  // namespace tessera
