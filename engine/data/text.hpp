// Byte-level text for language models: the bytes of a file as tokens 0..255,
// cut into next-token windows.
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/data/dataset.hpp"

namespace tessera {

// The bytes of `path` (gunzipped when gzipped) as i32 [bytes], each 0..255.
// Throws DataError for a missing or empty file.
Tensor load_text_bytes(const std::filesystem::path& path);

// Next-token windows over i32 [L] `tokens`: window i starts at s_i = i * stride
// and has inputs[i] = tokens[s_i : s_i + context] and targets[i] =
// tokens[s_i + 1 : s_i + context + 1], both i32 [N, context]. `stride` 0 means
// `context` (consecutive windows); a smaller stride makes them overlap, at the
// cost of context / stride copies of the text in memory. Tokens after the last
// whole window are left out. Throws DataError when
// the tokens do not fill one window (L < context + 1).
Dataset text_windows(const Tensor& tokens, std::int64_t context, std::int64_t stride = 0);

}  // namespace tessera
