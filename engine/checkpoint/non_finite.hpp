// Weights that hold NaN or infinities. Training never saves them (a
// non-finite loss stops a run before its save), so a checkpoint that holds
// them was damaged without its checksum noticing (a file from another
// writer has none) or written on purpose. Loaders refuse them unless asked:
// a model that loads them computes nothing but NaN, with no error to say why.
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/tensor.hpp"

namespace tessera {

enum class NonFinite { refuse, allow };

struct NonFiniteCount {
  std::int64_t count = 0;   // values that are NaN or infinite
  std::int64_t first = -1;  // the first one's element (row-major), -1 with none
};

// Of a host tensor; tensors of integer dtypes have none.
NonFiniteCount count_non_finite(const Tensor& t);

// "3 of 100 values are NaN or infinite (the first at element 7)"
std::string describe_non_finite(const NonFiniteCount& found, std::int64_t numel);

// With NonFinite::refuse, throws CheckpointError "<where>: <what>:
// <describe_non_finite>; refused ..." when `t` holds any; else does nothing.
// `what` names `t`: "tensor 'dense/kernel'", "block [0:4, 3:6] of tensor 'w'".
void check_finite(const Tensor& t, const std::string& where, const std::string& what, NonFinite policy);

}  // namespace tessera
