// Keras' validation_split: the last fraction of a dataset's samples, taken
// before any shuffling, held out for validation.
#pragma once

#include <utility>

#include "engine/data/dataset.hpp"

namespace tessera {

// {training part, validation part}: the validation part is the last
// n - floor(n * (1 - fraction)) samples, as Keras splits. Both share the
// dataset's tensors (views, no copy). Throws DataError when `fraction` is
// not in (0, 1) or either part would be empty.
std::pair<Dataset, Dataset> split_validation(const Dataset& data, double fraction);

// How many of `n` samples split_validation keeps for training: floor(n (1 - fraction)).
std::int64_t training_part(std::int64_t n, double fraction);

}  // namespace tessera
