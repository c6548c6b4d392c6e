#include "engine/checkpoint/checkpoint.hpp"

#include "engine/checkpoint/json_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <optional>
#include <regex>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors.hpp"
#include "engine/core/file_io.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "training_state.json";
constexpr const char* kFormat = "tessera-checkpoint";

std::string describe(const Variable& v) { return std::string(dtype_name(v.dtype())) + v.shape().str(); }

std::string errno_text(int error) { return std::generic_category().message(error); }

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

// A sibling of `dir` no other writer uses: "<dir><tag><host>-<pid>-<counter>-<clock>".
// The host and pid say whose it is, for remove_stale_scratch.
fs::path unique_sibling(const fs::path& dir, const char* tag) {
  static std::atomic<std::uint64_t> counter{0};
  const auto clock = std::chrono::steady_clock::now().time_since_epoch().count();
  return dir.parent_path() / (dir.filename().string() + tag + host_name() + "-" + std::to_string(::getpid()) + "-" +
                              std::to_string(counter.fetch_add(1)) + "-" + std::to_string(clock & 0xffffff));
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Whether a scratch folder's name suffix (after "<dir>.tmp-") names a save
// that can no longer finish:
// - "step<N>", a sharded save's: a sharded save asks only once every writer
//   of its job has arrived, so none of its own is in use; a save by another
//   job into the same checkpoint at the same time is not supported anyway;
// - "<host>-<pid>-<n>-<clock>" of a process of this host that no longer
//   exists. A name without the host (written before hosts were recorded) is
//   taken as this host's. Another host's is left, as is a folder whose pid
//   was reused by a live process (kept: the safe mistake).
bool stale_scratch(std::string_view suffix) {
  if (suffix.starts_with("step")) return all_digits(suffix.substr(4));
  std::vector<std::string_view> fields;  // from the right: clock, counter, pid, then the host
  for (int i = 0; i < 3; ++i) {
    const auto dash = suffix.rfind('-');
    fields.push_back(suffix.substr(dash == std::string_view::npos ? 0 : dash + 1));
    suffix = dash == std::string_view::npos ? std::string_view() : suffix.substr(0, dash);
    if (!all_digits(fields.back())) return false;
  }
  if ((!suffix.empty() && suffix != host_name()) || fields[2].size() > 9) return false;  // a pid fits 9 digits
  const long pid = std::stol(std::string(fields[2]));
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Removes the scratch folders that killed saves into `dir` left beside it: a
// job preempted again and again would otherwise fill its disk. Best effort:
// a folder that cannot be removed only costs space.
void remove_stale_scratch(const fs::path& dir) {
  const std::string prefix = dir.filename().string() + ".tmp-";
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir.has_parent_path() ? dir.parent_path() : fs::path("."), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix) && entry.is_directory(ec) && stale_scratch(std::string_view(name).substr(prefix.size())))
      stale.push_back(entry.path());
  }
  for (const fs::path& path : stale) fs::remove_all(path, ec);
}

// A scratch directory, removed with its content when this goes out of scope.
// After the swap into place it holds the replaced checkpoint, which goes too.
class ScratchDir {
 public:
  explicit ScratchDir(fs::path path) : path_(std::move(path)) {}
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);  // best effort: a leftover is garbage, never a checkpoint
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// A tensor a checkpoint lists: its value, where it was read.
struct Listed {
  std::string path;
  Shape shape;
  DType dtype;
  Tensor value;  // undefined when the load reads no values
};

std::string describe(const Listed& t) { return std::string(dtype_name(t.dtype)) + t.shape.str(); }

// A fingerprint lists a file's tensors in order: [{"path", "shape", "dtype"}, ...].
Json fingerprint_entry(const std::string& path, const Shape& shape, DType dtype) {
  return Json{{"path", path}, {"shape", shape.dims()}, {"dtype", dtype_name(dtype)}};
}

// The fingerprint of the tensors a checkpoint's file holds.
Json fingerprint(const std::vector<Listed>& tensors) {
  Json list = Json::array();
  for (const Listed& t : tensors) list.push_back(fingerprint_entry(t.path, t.shape, t.dtype));
  return list;
}

// The fingerprint of the store's model variables (or its optimizer state), in
// store order, as either form of save writes them; from shapes, since a
// deferred variable has no tensor.
Json store_fingerprint(const VariableStore& store, bool optimizer_state) {
  Json list = Json::array();
  for (const Variable& v : store.variables())
    if (is_optimizer_state(v.path) == optimizer_state) list.push_back(fingerprint_entry(v.path, v.shape(), v.dtype()));
  return list;
}

// Moves the complete checkpoint `scratch` to `dir`, atomically replacing an
// existing one; on return `scratch` holds the old checkpoint, if there was one.
template <typename MakeError>
void install(const fs::path& scratch, const fs::path& dir, const MakeError& error) {
  // Absent (or an empty directory): a plain rename replaces it atomically.
  if (::rename(scratch.c_str(), dir.c_str()) == 0) return;
  if (errno != ENOTEMPTY && errno != EEXIST)
    throw error("cannot rename '" + scratch.string() + "' into place: " + errno_text(errno));
#ifdef RENAME_EXCHANGE
  // Swap the two directories in one step: no moment without a checkpoint.
  if (::renameat2(AT_FDCWD, scratch.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) return;
  if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
    throw error("cannot swap '" + scratch.string() + "' into place: " + errno_text(errno));
#endif
  // A file system without the exchange: move the old one aside, the new one in.
  // A crash between the two renames leaves the old checkpoint beside `dir`.
  const fs::path old = unique_sibling(dir, ".old-");
  if (::rename(dir.c_str(), old.c_str()) != 0)
    throw error("cannot move the old checkpoint aside: " + errno_text(errno));
  if (::rename(scratch.c_str(), dir.c_str()) != 0) {
    const int failure = errno;
    if (::rename(old.c_str(), dir.c_str()) != 0)
      throw error("cannot rename the new checkpoint into place (" + errno_text(failure) +
                  "); the old one is at '" + old.string() + "'");
    throw error("cannot rename the new checkpoint into place: " + errno_text(failure));
  }
  std::error_code ec;
  fs::rename(old, scratch, ec);  // so that the scratch directory's cleanup removes it
  if (ec) fs::remove_all(old, ec);
}

// Reads training_state.json: the state and the two fingerprints.
struct StateFile {
  TrainingState state;
  Json model_variables, optimizer_variables;
};

StateFile read_state(const fs::path& file) {
  auto error = [&](const std::string& message) {
    return CheckpointError("load_checkpoint: '" + file.string() + "': " + message);
  };
  Json j = read_json_object(file, "load_checkpoint: '" + file.string() + "'");
  if (!j.contains("format") || j["format"] != kFormat)
    throw error(std::string("not a Tessera checkpoint state (\"format\" is not \"") + kFormat + "\")");
  if (!j.contains("format_version") || !j["format_version"].is_number_integer())
    throw error("'format_version' is missing or not an integer");
  if (j["format_version"].get<std::int64_t>() != kCheckpointFormatVersion)
    throw error("format version " + j["format_version"].dump() + " is not the version " +
                std::to_string(kCheckpointFormatVersion) + " this Tessera reads" +
                (j["format_version"].get<std::int64_t>() > kCheckpointFormatVersion
                     ? " (written by a newer Tessera)"
                     : ""));
  auto count = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number_unsigned())
      throw error(std::string("'") + key + "' is missing or not a non-negative integer");
    return j[key].get<std::uint64_t>();
  };
  auto list = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_array())
      throw error(std::string("'") + key + "' is missing or not a list");
    return j[key];
  };
  StateFile out;
  out.state.step = static_cast<std::int64_t>(count("step"));
  out.state.epoch = static_cast<std::int64_t>(count("epoch"));
  out.state.batch = static_cast<std::int64_t>(count("batch"));
  out.state.seed = count("seed");
  if (!j.contains("config") || !j["config"].is_string())
    throw error("'config' is missing or not a string");
  out.state.config = j["config"].get<std::string>();
  // Kept since 2026-11-28; a checkpoint written before has neither (factor 1, no figures).
  if (j.contains("learning_rate_scale")) {
    const Json& scale = j["learning_rate_scale"];
    if (!scale.is_number() || !std::isfinite(scale.get<double>()) || scale.get<double>() <= 0)
      throw error("'learning_rate_scale' is " + scale.dump() + ", not a positive number");
    out.state.learning_rate_scale = scale.get<double>();
  }
  if (j.contains("figures")) {
    if (!j["figures"].is_object()) throw error("'figures' is not an object of numbers");
    for (const auto& [name, value] : j["figures"].items()) {
      if (!value.is_number()) throw error("figure '" + name + "' is " + value.dump() + ", not a number");
      out.state.figures[name] = value.get<double>();
    }
  }
  if (j.contains("callbacks")) {  // kept since 2026-11-29
    if (!j["callbacks"].is_object()) throw error("'callbacks' is " + j["callbacks"].dump() + ", not an object");
    for (const auto& [key, counts] : j["callbacks"].items()) {
      if (!counts.is_object()) throw error("'callbacks' entry '" + key + "' is " + counts.dump() + ", not an object");
      for (const auto& [name, value] : counts.items()) {
        if (!value.is_number())
          throw error("'callbacks' entry '" + key + "': '" + name + "' is " + value.dump() + ", not a number");
        out.state.callbacks[key][name] = value.get<double>();
      }
    }
  }
  if (j.contains("epoch_sums")) {
    const Json& sums = j["epoch_sums"];
    const auto bad = [&] { return error("'epoch_sums' is not {loss: number, samples: count, metrics: [[[numbers]]]}"); };
    if (!sums.is_object() || !sums.contains("loss") || !sums["loss"].is_number() || !sums.contains("samples") ||
        !sums["samples"].is_number_unsigned() || !sums.contains("metrics") || !sums["metrics"].is_array())
      throw bad();
    EpochSums e{.loss = sums["loss"].get<double>(), .samples = sums["samples"].get<std::int64_t>(), .metrics = {}};
    try {
      sums["metrics"].get_to(e.metrics);
    } catch (const nlohmann::json::exception&) {  // not arrays of arrays of numbers
      throw bad();
    }
    out.state.epoch_sums = std::move(e);
  }
  out.model_variables = list("model_variables");
  out.optimizer_variables = list("optimizer_variables");
  return out;
}

// Fingerprint entries compared key by key: a state file saved again by
// another JSON writer (Python's json with sort_keys) may order them otherwise.
bool same_entry(const Json& a, const Json& b) {
  if (!a.is_object() || !b.is_object() || a.size() != b.size()) return a == b;
  for (const auto& [key, value] : a.items())
    if (!b.contains(key) || b[key] != value) return false;
  return true;
}

// The tensors of `file` must be what training_state.json lists for it: a
// mismatch means files of different checkpoints were put together.
void check_fingerprint(const Json& listed, const std::vector<Listed>& tensors, const fs::path& file,
                       const fs::path& state_file) {
  Json actual = fingerprint(tensors);
  std::string detail;
  for (std::size_t i = 0; i < std::max(listed.size(), actual.size()); ++i) {
    if (i < listed.size() && i < actual.size() && same_entry(listed[i], actual[i])) continue;
    detail = i < listed.size() ? "it lists " + listed[i].dump() : "it lists nothing";
    detail += " as tensor " + std::to_string(i) + ", the file holds " +
              (i < actual.size() ? actual[i].dump() : std::string("nothing"));
    break;
  }
  if (detail.empty()) return;
  throw CheckpointError("load_checkpoint: '" + state_file.string() + "' does not describe '" +
                        file.string() + "' (files of different checkpoints?): " + detail);
}

// The checkpoint directory `dir_arg` names, checked: a name of its own, a
// non-negative state, its parent created, and nothing there that is not a checkpoint.
fs::path checked_dir(const fs::path& dir_arg, const TrainingState& state) {
  fs::path dir = dir_arg.lexically_normal();
  if (!dir.has_filename() && dir.has_parent_path()) dir = dir.parent_path();  // "runs/x/"
  auto error = [&](const std::string& message) {
    return CheckpointError("save_checkpoint: '" + dir.string() + "': " + message);
  };
  if (dir.empty() || dir.filename() == "." || dir.filename() == ".." || dir == dir.root_path())
    throw error("a checkpoint needs a directory name of its own");
  if (state.step < 0 || state.epoch < 0 || state.batch < 0)
    throw error("the training state (step " + std::to_string(state.step) + ", epoch " +
                std::to_string(state.epoch) + ", batch " + std::to_string(state.batch) +
                ") must not be negative");
  std::error_code ec;
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) throw error("cannot create the folder '" + parent.string() + "': " + ec.message());
  // A link to a checkpoint: replace the directory it names (a link cannot be swapped with one).
  if (fs::is_symlink(dir, ec)) {
    dir = fs::canonical(dir, ec);
    if (ec) throw error("is a link that leads nowhere: " + ec.message());
  }
  // Never replace what is not a checkpoint (a typo in `dir` must not delete a
  // folder of data).
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw error("exists and is not a directory");
    if (!fs::is_empty(dir, ec) && !fs::exists(dir / kStateFile, ec))
      throw error(std::string("exists and is not a checkpoint (it has no ") + kStateFile +
                  "); refusing to replace it");
  }
  return dir;
}

// The store's variables, model and optimizer state apart, checked to be defined host tensors.
std::pair<NamedTensors, NamedTensors> split_store(const VariableStore& store, const fs::path& dir) {
  NamedTensors model, optimizer;
  for (const Variable& v : store.variables()) {
    if (!v.value.defined())
      throw CheckpointError("save_checkpoint: '" + dir.string() + "': variable '" + v.path +
                            "' is undefined (it has no storage)");
    if (v.value.device().kind != DeviceKind::cpu)
      throw CheckpointError("save_checkpoint: '" + dir.string() + "': variable '" + v.path + "' is " +
                            v.value.describe() + ", not a host tensor");
    (is_optimizer_state(v.path) ? optimizer : model).emplace_back(v.path, v.value);
  }
  return {std::move(model), std::move(optimizer)};
}

void write_state(const fs::path& folder, const TrainingState& state, const Json& model_variables,
                 const Json& optimizer_variables, const std::string& resolved_config) {
  Json json{{"format", kFormat},
            {"format_version", kCheckpointFormatVersion},
            {"step", state.step},
            {"epoch", state.epoch},
            {"batch", state.batch},
            {"seed", state.seed},
            {"learning_rate_scale", state.learning_rate_scale},
            {"figures", Json::object()},
            {"model_variables", model_variables},
            {"optimizer_variables", optimizer_variables},
            {"config", resolved_config}};
  for (const auto& [name, value] : state.figures)
    if (std::isfinite(value)) json["figures"][name] = value;  // JSON has no NaN
  for (const auto& [key, counts] : state.callbacks)
    for (const auto& [name, value] : counts)
      if (std::isfinite(value)) json["callbacks"][key][name] = value;
  if (state.epoch_sums)  // (finite: a step whose loss is not stops training first)
    json["epoch_sums"] = {{"loss", state.epoch_sums->loss},
                          {"samples", state.epoch_sums->samples},
                          {"metrics", state.epoch_sums->metrics}};
  std::string text;
  try {
    text = json.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a path or the config
    throw CheckpointError(std::string("cannot encode ") + kStateFile + ": " + e.what());
  }
  write_file_atomic(folder / kStateFile, {{text.data(), text.size()}}, "save_checkpoint");
}

// Syncs the complete `scratch` and swaps it into place at `dir`.
// A file a checkpoint is made of (of either form): the save replaces these.
bool is_checkpoint_file(const std::string& name) {
  static const std::regex shard("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  return name == kModelFile || name == kOptimizerFile || name == kStateFile || name == kShardIndexFile ||
         std::regex_match(name, shard);
}

// Whatever else the user keeps in the checkpoint directory (notes, a metrics
// log being written) moves with it: each such file is hard-linked into the new
// checkpoint before the swap, so the old directory's removal loses nothing and
// an open log keeps its file. A folder or a file that cannot be linked stops
// the save before anything is replaced.
template <typename MakeError>
std::vector<fs::path> user_files(const fs::path& dir, const MakeError& error) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (is_checkpoint_file(name)) continue;
    if (entry.is_directory(ec) || entry.is_symlink(ec))
      throw error("holds '" + name + "', which is not a checkpoint file and would be deleted with the old checkpoint; " +
                  "move it out of the checkpoint directory");
    files.push_back(entry.path());
  }
  if (ec) throw error("cannot list the old checkpoint: " + ec.message());
  return files;
}

template <typename MakeError>
void carry_over_user_files(const fs::path& dir, const fs::path& scratch, const MakeError& error) {
  std::error_code ec;
  for (const fs::path& file : user_files(dir, error)) {
    const std::string name = file.filename().string();
    fs::create_hard_link(file, scratch / name, ec);
    if (ec)
      throw error("cannot keep '" + name + "' (not a checkpoint file) in the new checkpoint: " + ec.message() +
                  "; move it out of the checkpoint directory");
  }
}

void finish(const fs::path& scratch, const fs::path& dir) {
  auto error = [&](const std::string& message) {
    return CheckpointError("save_checkpoint: '" + dir.string() + "': " + message);
  };
  carry_over_user_files(dir, scratch, error);
  sync_directory(scratch);
  install(scratch, dir, error);
  sync_directory(dir.has_parent_path() ? dir.parent_path() : fs::path("."));
}

// The tensors `listed` (a fingerprint of training_state.json), in that
// order: read whole through `checkpoint` (whichever mesh and process count
// wrote them), or with `read` false their names, shapes and dtypes alone.
std::vector<Listed> tensors_of(CheckpointReader& checkpoint, const Json& listed, bool read) {
  const fs::path& dir = checkpoint.dir();
  const ShardIndex& index = checkpoint.index();
  std::vector<Listed> out;
  for (const auto& entry : listed) {
    const std::string path = entry.contains("path") && entry["path"].is_string() ? entry["path"].get<std::string>() : "";
    auto it = index.tensors.find(path);
    if (it == index.tensors.end())
      throw CheckpointError("load_checkpoint: '" + dir.string() + "' has no tensor '" + path + "', which " +
                            kStateFile + " lists");
    Tensor value = read ? checkpoint.read(path, ShardSlice::whole(it->second.shape)) : Tensor();
    out.push_back({path, Shape(it->second.shape), it->second.dtype, std::move(value)});
  }
  return out;
}

std::vector<Listed> listed_of(SafetensorsFile file) {
  std::vector<Listed> out;
  for (auto& [path, t] : file.tensors) out.push_back({path, t.shape(), t.dtype(), t});
  return out;
}

}  // namespace

void check_checkpoint_dir(const fs::path& dir_arg) {
  const fs::path dir = checked_dir(dir_arg, TrainingState{});
  user_files(dir, [&](const std::string& message) {
    return CheckpointError("save_checkpoint: '" + dir.string() + "': " + message);
  });
}

void save_checkpoint(const fs::path& dir_arg, const VariableStore& store, const TrainingState& state,
                     const std::string& resolved_config) {
  const fs::path dir = checked_dir(dir_arg, state);
  auto error = [&](const std::string& message) {
    return CheckpointError("save_checkpoint: '" + dir.string() + "': " + message);
  };
  const auto [model, optimizer] = split_store(store, dir);
  std::error_code ec;
  remove_stale_scratch(dir);
  ScratchDir scratch(unique_sibling(dir, ".tmp-"));
  if (!fs::create_directory(scratch.path(), ec) || ec)
    throw error("cannot create '" + scratch.path().string() + "': " +
                (ec ? ec.message() : std::string("it exists")));
  try {
    const std::string step = std::to_string(state.step);
    save_safetensors(scratch.path() / kModelFile, model,
                     {{"format", "tessera"}, {"content", "model"}, {"step", step}});
    save_safetensors(scratch.path() / kOptimizerFile, optimizer,
                     {{"format", "tessera"}, {"content", "optimizer"}, {"step", step}});
    write_state(scratch.path(), state, store_fingerprint(store, false), store_fingerprint(store, true), resolved_config);
  } catch (const Error& e) {  // CheckpointError or DataError, naming the scratch file
    throw error(e.what());
  }
  finish(scratch.path(), dir);
}

void save_checkpoint(const fs::path& dir_arg, const VariableStore& store, const TrainingState& state,
                     const std::string& resolved_config, const ShardedSave& sharded) {
  const fs::path dir = checked_dir(dir_arg, state);
  auto error = [&](const std::string& message) {
    return CheckpointError("save_checkpoint: '" + dir.string() + "': " + message);
  };
  // Every writer must find the same scratch folder: named by the step, made
  // afresh by writer 0 once all have arrived (a crashed save's leftover is
  // replaced), so that waiting to arrive never waits on writer 0's I/O.
  const fs::path scratch_path = dir.parent_path() / (dir.filename().string() + ".tmp-step" + std::to_string(state.step));
  std::optional<ScratchDir> scratch;  // writer 0's: removed once installed (then it holds the old checkpoint)
  (sharded.meet ? sharded.meet : sharded.barrier)();  // a caller with one barrier uses it for both
  if (sharded.writer == 0) {
    remove_stale_scratch(dir);  // this step's too: every writer is here, none writes yet
    std::error_code ec;
    if (!fs::create_directory(scratch_path, ec) || ec)
      throw error("cannot create '" + scratch_path.string() + "': " + (ec ? ec.message() : std::string("it exists")));
    scratch.emplace(scratch_path);
  }
  sharded.barrier();
  try {
    write_shard_file(scratch_path, sharded.writer, sharded.writers, sharded.blocks);
  } catch (const Error& e) {
    throw error(e.what());
  }
  sharded.barrier();
  if (sharded.writer == 0) {
    try {
      save_shard_index(scratch_path, sharded.index);
      write_state(scratch_path, state, store_fingerprint(store, false), store_fingerprint(store, true), resolved_config);
    } catch (const Error& e) {
      throw error(e.what());
    }
    finish(scratch_path, dir);
    scratch.reset();  // removes the replaced checkpoint now, not while the others train on
  }
  sharded.barrier();
}

std::string renamed_model_hint(const std::vector<std::string>& model, const std::vector<std::string>& saved) {
  // Each side's first path components, and the paths below them.
  auto split = [](const std::vector<std::string>& paths) {
    std::set<std::string> firsts, rests;
    for (const std::string& path : paths) {
      if (is_optimizer_state(path)) continue;
      const std::size_t slash = path.find('/');
      if (slash == std::string::npos) return std::pair<std::set<std::string>, std::set<std::string>>{};
      firsts.insert(path.substr(0, slash));
      rests.insert(path.substr(slash + 1));
    }
    return std::pair{firsts, rests};
  };
  const auto [model_names, model_rests] = split(model);
  const auto [saved_names, saved_rests] = split(saved);
  if (model_names.size() != 1 || saved_names.size() != 1 || model_names == saved_names || model_rests != saved_rests)
    return "";
  const std::string& old_name = *saved_names.begin();
  return "its variables are the model's under the name '" + old_name + "' instead of '" + *model_names.begin() +
         "': was the model renamed? Load it under the name it was saved with: name: " + old_name +
         " under model: (in the model's file where the config names one)";
}

CheckpointReport verify_checkpoint(const fs::path& dir, const CheckpointProgress& progress) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw CheckpointError("verify: '" + dir.string() + "': " + (fs::exists(dir, ec) ? "is not a directory" : "no such checkpoint directory"));
  const StateFile state_file = read_state(dir / kStateFile);
  CheckpointReader checkpoint(dir, checkpoint_index(dir));
  const ShardIndex& index = checkpoint.index();
  const std::vector<Listed> model = tensors_of(checkpoint, state_file.model_variables, false);
  const std::vector<Listed> optimizer = tensors_of(checkpoint, state_file.optimizer_variables, false);
  const bool sharded = fs::exists(dir / kShardIndexFile, ec);
  check_fingerprint(state_file.model_variables, model, dir / (sharded ? kShardIndexFile : kModelFile), dir / kStateFile);
  check_fingerprint(state_file.optimizer_variables, optimizer, dir / (sharded ? kShardIndexFile : kOptimizerFile),
                    dir / kStateFile);

  CheckpointReport report;
  std::set<std::string> files;
  for (const auto& [name, info] : index.tensors)
    for (const ShardEntry& block : info.shards) files.insert(block.file);
  for (const std::string& file : files) {
    const SafetensorsHeader header = read_safetensors_header(dir / file);
    ++report.files;
    for (const SafetensorsEntry& entry : header.tensors) {
      ++report.blocks;
      if (entry.crc32) ++report.checksummed;
    }
  }
  for (const auto* listed : {&model, &optimizer})
    for (const Listed& t : *listed) {
      const Tensor value = checkpoint.read(t.path, ShardSlice::whole(t.shape.dims()));  // checks checksums
      ++report.tensors;
      report.bytes += value.nbytes();
      if (const NonFiniteCount found = count_non_finite(value); found.count > 0)
        report.non_finite.push_back(t.path + ": " + describe_non_finite(found, value.numel()));
      if (progress) progress(report.tensors, model.size() + optimizer.size(), report.bytes);
    }
  return report;
}

ShardIndex checkpoint_index(const fs::path& dir) {
  if (fs::exists(dir / kShardIndexFile)) return load_shard_index(dir);
  // One file each for the model and the optimizer state: an index of whole tensors.
  ShardIndex index;
  for (const char* file : {kModelFile, kOptimizerFile})
    for (const SafetensorsEntry& e : read_safetensors_header(dir / file).tensors)
      index.tensors[e.name] = ShardedTensorInfo{e.dtype, e.shape, {ShardEntry{file, e.name, ShardSlice::whole(e.shape)}}};
  return index;
}

TrainingState read_training_state(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kStateFile, ec))
    throw CheckpointError("read_training_state: '" + dir.string() + "' has no " + kStateFile +
                          " (not a checkpoint, or an incomplete one)");
  return read_state(dir / kStateFile).state;
}

TrainingState load_checkpoint(const fs::path& dir, VariableStore& store, LoadValues values, NonFinite non_finite) {
  auto error = [&](const std::string& message) {
    return CheckpointError("load_checkpoint: '" + dir.string() + "': " + message);
  };
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw error(fs::exists(dir, ec) ? "is not a directory" : "no such checkpoint directory");
  const bool sharded = fs::exists(dir / kShardIndexFile, ec);
  for (const char* file : {kStateFile, sharded ? kShardIndexFile : kModelFile, sharded ? kShardIndexFile : kOptimizerFile})
    if (!fs::exists(dir / file, ec))
      throw error(std::string("has no ") + file + " (not a checkpoint, or an incomplete one)");

  // Phase 1: read and check everything; the store is not touched.
  StateFile state_file = read_state(dir / kStateFile);
  const bool read = values == LoadValues::all;
  std::vector<Listed> model, optimizer;
  if (sharded || !read) {
    CheckpointReader checkpoint(dir, checkpoint_index(dir));
    model = tensors_of(checkpoint, state_file.model_variables, read);
    optimizer = tensors_of(checkpoint, state_file.optimizer_variables, read);
  } else {
    model = listed_of(load_safetensors(dir / kModelFile));
    optimizer = listed_of(load_safetensors(dir / kOptimizerFile));
  }
  check_fingerprint(state_file.model_variables, model, dir / kModelFile, dir / kStateFile);
  check_fingerprint(state_file.optimizer_variables, optimizer, dir / kOptimizerFile, dir / kStateFile);
  if (read)
    for (const auto* file : {&model, &optimizer})
      for (const Listed& t : *file) check_finite(t.value, "load_checkpoint: '" + dir.string() + "'", "tensor '" + t.path + "'", non_finite);
  for (const Listed& t : model)
    if (is_optimizer_state(t.path))
      throw error(std::string(kModelFile) + " holds optimizer state '" + t.path + "'");
  for (const Listed& t : optimizer)
    if (!is_optimizer_state(t.path))
      throw error(std::string(kOptimizerFile) + " holds '" + t.path +
                  "', which is not optimizer state (\"optimizer/...\")");

  std::unordered_map<std::string, const Listed*> saved;
  for (const auto* file : {&model, &optimizer})
    for (const Listed& t : *file) saved.emplace(t.path, &t);
  std::vector<std::pair<std::size_t, const Listed*>> copies;  // store index, checkpoint value
  std::unordered_set<std::string> in_store;
  const auto& variables = store.variables();
  for (std::size_t i = 0; i < variables.size(); ++i) {
    const Variable& v = variables[i];
    in_store.insert(v.path);
    const bool optimizer_state = is_optimizer_state(v.path);
    auto found = saved.find(v.path);
    if (found == saved.end()) {
      if (optimizer_state)
        throw error("the store holds optimizer state '" + v.path +
                    "' that the checkpoint lacks (was it saved with another optimizer?)");
      std::vector<std::string> model_paths, saved_paths;
      for (const Variable& m : variables) model_paths.push_back(m.path);
      for (const Listed& t : model) saved_paths.push_back(t.path);
      const std::string renamed = renamed_model_hint(model_paths, saved_paths);
      throw error("the checkpoint is for another model: the model's variable '" + v.path + "' (" +
                  describe(v) + ") is not in it" + (renamed.empty() ? "" : "; " + renamed));
    }
    // A deferred variable has no storage yet: a read allocates it.
    if ((!v.value.defined() && !v.deferred()) || (v.value.defined() && v.value.device().kind != DeviceKind::cpu))
      throw error("variable '" + v.path + "' of the store is not a defined host tensor");
    const Listed& value = *found->second;
    if (value.shape != v.shape() || value.dtype != v.dtype())
      throw error(std::string(optimizer_state ? "optimizer state" : "the checkpoint is for another model: variable") +
                  " '" + v.path + "' is " + describe(v) + " in the " +
                  (optimizer_state ? "store" : "model") + " but " + describe(value) +
                  " in the checkpoint");
    copies.emplace_back(i, &value);
  }
  for (const Listed& t : model)
    if (!in_store.contains(t.path))
      throw error("the checkpoint is for another model: its variable '" + t.path + "' (" +
                  describe(t) + ") is not in the model");

  // Optimizer state the store lacks yet (a run resumed before its first
  // step). Without values read, zeros that whoever loads the values replaces:
  // a deferring store keeps them deferred, so no whole is made; else they are
  // allocated here, before the store changes.
  const BlockInit zeros = [](const Tensor& t, std::span<const std::int64_t>) { std::memset(t.raw_data(), 0, t.nbytes()); };
  std::vector<Variable> additions;
  for (Listed& t : optimizer) {
    if (in_store.contains(t.path)) continue;
    additions.push_back(Variable{t.path, t.value, /*trainable=*/false, {}, t.shape, t.dtype, zeros});
    if (!store.defers_values()) VariableStore::materialize(additions.back());
  }

  // Phase 2: nothing below throws once the store has room for the new state.
  auto& mutable_variables = store.variables();
  mutable_variables.reserve(mutable_variables.size() + additions.size());
  for (const auto& [index, listed] : copies) {
    Variable& v = mutable_variables[index];
    if (!read) continue;
    if (v.deferred()) v.value = listed->value;  // no program holds it yet: take the tensor read
    else if (listed->value.nbytes() > 0) std::memcpy(v.value.raw_data(), listed->value.raw_data(), listed->value.nbytes());
  }
  for (Variable& added : additions) mutable_variables.push_back(std::move(added));
  return state_file.state;
}

}  // namespace tessera
