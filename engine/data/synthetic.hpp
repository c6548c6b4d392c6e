// Deterministic synthetic datasets for tests and benchmarks: every value is a
// pure function of (seed, index) through Philox, so a dataset is the same on
// every machine and run, and needs no file.
#pragma once

#include <cstdint>

#include "engine/data/dataset.hpp"

namespace tessera {

// Gaussian blobs: labels i32 [n] uniform in [0, classes); inputs f32
// [n, sample_shape...] are the label's class mean (entries N(0, 1), drawn once
// per class) plus N(0, 1) noise, so a model can learn them (unlike random labels).
Dataset synthetic_classification(std::int64_t n, const Shape& sample_shape, std::int64_t classes,
                                 std::uint64_t seed);

// A linear teacher: inputs f32 [n, sample_shape...] with N(0, 1) entries;
// targets f32 [n, outputs] = flatten(input) . W + noise * N(0, 1), where W
// [D, outputs] has N(0, 1 / D) entries (D the elements of one sample), so
// targets have about unit variance.
Dataset synthetic_regression(std::int64_t n, const Shape& sample_shape, std::int64_t outputs,
                             std::uint64_t seed, float noise = 0.0f);

}  // namespace tessera
