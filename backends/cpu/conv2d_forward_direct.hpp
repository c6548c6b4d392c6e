// A convolution over few input channels (a network's first layer: a gray or
// an RGB image) as register-tiled products read straight from x, for CPUs
// with AVX-512.
//
// Each output row of the batch is tiles of 6 positions by up to 64 output
// channels, whose 24 accumulators stay in registers: per window row
// (KH*KW*C of them), 4 vectors of the kernel and 6 broadcast inputs feed 24
// FMAs. Nothing is copied (no im2col), except x with its padding laid out,
// for padded convolutions. Threads take runs of output rows.
//
// oneDNN 2.6 has no kernel for so few channels that keeps its FMAs fed: on
// a 2-vCPU Zen 5 (2026-12-07) the reference CNN's first convolution ([64, 28,
// 28, 1] -> [64, 26, 26, 32], ReLU) took 245 us against oneDNN's 342 with
// the operands in cache and 333 against 802 with them evicted, one thread;
// 128 against 167 and 176 against 448 on two. Three channels into 32 (32x32
// images): 1.48x and 2.0x oneDNN's speed on one thread.
#pragma once

#include <cstddef>

#include "backends/op_args.hpp"
#include "engine/core/tensor.hpp"

namespace tessera {

// Whether this path runs x[N, H, W, C] into y by kernel w[KH, KW, C, F] of
// `dtype` with `activation` after the bias: f32, C of at most
// kConvForwardDirectChannels, windows (KH * KW * C) of at most
// kConvForwardDirectWindow inputs (7 x 7 over 4 channels), F a multiple of
// 16 (whole vectors), no activation or a ReLU, and a CPU with AVX-512.
inline constexpr std::int64_t kConvForwardDirectChannels = 4;
inline constexpr std::int64_t kConvForwardDirectWindow = 196;
bool conv_forward_direct(DType dtype, const Shape& x, const Shape& w, Activation activation);

// Floats of scratch that conv2d_forward_direct needs (x with its padding).
std::size_t conv_forward_direct_scratch(const Shape& x, const Conv2dArgs& args);

// y = activation(conv(x, w) + bias), bias [F] or null, on `threads` OpenMP
// threads, with `scratch` of conv_forward_direct_scratch floats; only where
// conv_forward_direct says so. The ReLU zeroes a NaN, as oneDNN's does.
void conv2d_forward_direct(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y,
                           const Conv2dArgs& args, float* scratch, int threads);

}  // namespace tessera
