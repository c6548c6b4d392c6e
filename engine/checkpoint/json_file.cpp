#include "engine/checkpoint/json_file.hpp"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <system_error>

#include "engine/core/error.hpp"
#include "engine/core/printable.hpp"

namespace tessera {

nlohmann::ordered_json read_json_object(const std::filesystem::path& path, const std::string& where) {
  auto error = [&](const std::string& message) { return CheckpointError(where + ": " + message); };
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("cannot open: " + std::generic_category().message(errno));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw error("cannot read");
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw error("not valid JSON: " + printable(e.what()));
  }
  if (!j.is_object()) throw error("not a JSON object");
  return j;
}

}  // namespace tessera
