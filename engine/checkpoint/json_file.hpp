// Reading the small JSON files of a checkpoint (training_state.json, the shard
// index): one object per file, every failure a CheckpointError.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera {

// The JSON object in `path`; throws CheckpointError("<where>: cannot open: ..."),
// "not valid JSON: ..." or "not a JSON object".
nlohmann::ordered_json read_json_object(const std::filesystem::path& path, const std::string& where);

}  // namespace tessera
