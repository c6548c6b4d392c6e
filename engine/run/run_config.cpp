#include "engine/run/run_config.hpp"

#include "backends/device_set.hpp"
#include "backends/registry.hpp"
#include "distribution/calibration_cache.hpp"
#include "distribution/collectives/process_group.hpp"
#include "distribution/distribution_config.hpp"
#include "distribution/spmd_program.hpp"
#include "distribution/strategies.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/data/csv.hpp"
#include "engine/data/idx.hpp"
#include "engine/data/npy.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/data/text.hpp"
#include "engine/run/auto_choice.hpp"
#include "engine/run/tokenizer.hpp"

namespace tessera {
namespace {

const std::vector<std::string> kDataTypes = {"idx", "csv", "npz", "text", "synthetic"};

[[noreturn]] void config_error(const ConfigNode& node, const std::string& what) {
  throw ConfigError(node.location() + ": " + node.path() + ": " + what);
}

// `device:`: cpu (cpu:0) or a GPU this machine has.
Device parse_run_device(const ConfigNode& node, bool has_distribution) {
  if (has_distribution)
    node.fail("this run has a distribution: section, whose mesh names its devices in distribution.devices; "
              "device: is for a run on one device");
  const auto text = node.as<std::string>();
  Device device;
  try {
    device = Device::parse(text);
  } catch (const DeviceError& e) {
    node.fail(e.what());
  }
  if (device.kind == DeviceKind::cpu && device.index != 0)
    node.fail("'" + text + "': a run on one device runs on cpu:0 (logical CPU devices cpu:N are for distribution.devices)");
  if (device.kind == DeviceKind::cuda && device.index >= cuda_device_count())
    node.fail("'" + text + "': " +
              (cuda_compiled() ? "this machine has " + std::to_string(cuda_device_count()) + " GPU(s) that CUDA can see"
                               : std::string("this tessera was built without CUDA (no toolkit was found at build time)")));
  return device;
}

}  // namespace

RunConfig load_run_config(const std::filesystem::path& file, const std::vector<std::string>& overrides) {
  ConfigNode root = ConfigNode::load_file(file);
  for (const auto& o : overrides) apply_override(root, o);
  root.expect_keys({"model", "training", "data", "distribution", "device"});
  // `model: ../models/mlp.yaml` takes the `model:` of another file (the zoo);
  // errors in it then name that file.
  ConfigNode model = root["model"];
  if (model.is_scalar()) {
    const std::filesystem::path zoo_file = root.resolve_path(model.as<std::string>());
    std::error_code ec;
    if (!std::filesystem::is_regular_file(zoo_file, ec))
      model.fail("the model file '" + model.as<std::string>() + "' " +
                 (std::filesystem::exists(zoo_file, ec) ? "is not a file" : "does not exist") + " (looked for '" +
                 std::filesystem::absolute(zoo_file, ec).string() + "', relative to the config's folder)");
    ConfigNode zoo = ConfigNode::load_file(zoo_file);
    zoo.expect_keys({"model"});
    model = zoo["model"];
  }
  RunConfig run{root, Model::from_config(model), {}, root.has("training"), {}, {}, {}};
  if (const ConfigNode* tokenizer = run.model.declared_tokenizer()) check_tokenizer(*tokenizer);
  // `distribution: null` (`--set distribution=null`) is a run on one device, as no key is.
  if (auto distribution = root.find("distribution"); distribution && !distribution->is_null())
    run.distribution = parse_distribution(*distribution);
  if (run.has_training) run.training = parse_training(root["training"]);
  if (auto device = root.find("device")) run.device = parse_run_device(*device, run.distribution.has_value());
  if (root["model"].is_scalar()) root.set("model", model);  // the resolved config shows it whole
  if (auto data = root.find("data")) {
    if (!run.has_training) data->fail("a config with data: also needs training:");
    data->expect_keys({"train", "validation"});
    run.train_data = data->find("train");
    run.validation_data = data->find("validation");
    if (run.validation_data && run.training.validation_split > 0)
      root["training"]["validation_split"].fail(
          "validation_split holds out part of data.train for validation, but data.validation is given too: "
          "remove one of them");
  }
  return run;
}

namespace {

Dataset load_dataset_of_type(ConfigNode spec) {
  auto type = spec["type"].as<std::string>();
  if (type == "idx") {
    spec.expect_keys({"type", "images", "labels", "rescale"});
    return load_idx(spec.resolve_path(spec["images"].as<std::string>()),
                    spec.resolve_path(spec["labels"].as<std::string>()), static_cast<float>(input_rescale(spec)));
  }
  if (type == "csv") {
    spec.expect_keys({"type", "path", "label_column", "weight_column", "header", "rescale"});
    Dataset d = load_csv(spec.resolve_path(spec["path"].as<std::string>()), spec.get<std::string>("label_column", "-1"),
                         spec.get<bool>("header", true), spec.has("weight_column") ? spec["weight_column"].as<std::string>() : "");
    d.inputs = rescaled(d.inputs, input_rescale(spec));
    return d;
  }
  if (type == "npz") {
    spec.expect_keys({"type", "path", "inputs", "targets", "weights", "rescale"});
    auto path = spec.resolve_path(spec["path"].as<std::string>());
    Dataset d{rescaled(load_npz(path, spec.get<std::string>("inputs", "x")), input_rescale(spec)),
              load_npz(path, spec.get<std::string>("targets", "y")), path.string()};
    if (spec.has("weights")) d.weights = load_npz(path, spec["weights"].as<std::string>());  // converted by the trainer
    return d;
  }
  if (type == "text") {
    spec.expect_keys({"type", "path", "context", "stride", "split", "validation_fraction"});
    auto path = spec.resolve_path(spec["path"].as<std::string>());
    Tensor tokens = load_text_bytes(path);
    auto split = spec.get<std::string>("split", "train");
    double fraction = spec.get<double>("validation_fraction", 0.1);
    if (split != "train" && split != "validation") config_error(spec["split"], "split must be 'train' or 'validation'");
    if (fraction <= 0 || fraction >= 1) config_error(spec["validation_fraction"], "must lie in (0, 1)");
    // The last `fraction` of the bytes is held out for validation.
    auto cut = static_cast<std::int64_t>(static_cast<double>(tokens.numel()) * (1.0 - fraction));
    Tensor part = split == "train" ? tokens.rows(0, cut) : tokens.rows(cut, tokens.numel() - cut);
    const auto context = spec["context"].as<std::int64_t>(), stride = spec.get<std::int64_t>("stride", 0);
    if (context < 1) config_error(spec["context"], "context (bytes per window) must be >= 1");
    if (stride < 0) config_error(spec["stride"], "stride must be >= 1, or 0 for windows that do not overlap");
    Dataset d = text_windows(part, context, stride);
    d.source = path.string() + " (" + split + ")";
    return d;
  }
  if (type == "synthetic") {
    spec.expect_keys({"type", "samples", "shape", "classes", "seed"});
    const auto samples = spec["samples"].as<std::int64_t>(), classes = spec["classes"].as<std::int64_t>();
    const auto shape = spec["shape"].as<std::vector<std::int64_t>>();
    if (samples < 1) config_error(spec["samples"], "samples must be >= 1");
    if (classes < 2) config_error(spec["classes"], "classes must be >= 2");
    for (std::size_t i = 0; i < shape.size(); ++i)
      if (shape[i] < 1) config_error(spec["shape"].at(i), "a sample's dimensions must be >= 1");
    return synthetic_classification(samples, Shape(shape), classes,
                                    static_cast<std::uint64_t>(spec.get<std::int64_t>("seed", 0)));
  }
  spec["type"].fail_unknown("data type", type, kDataTypes);
}

}  // namespace

double input_rescale(const ConfigNode& spec) {
  const auto key = spec.find("rescale");
  if (!key) return spec.has("type") && spec["type"].as<std::string>() == "idx" ? 1.0 / 255.0 : 1.0;
  const std::string text = key->as<std::string>();
  double factor = 0;
  try {
    std::size_t used = 0;
    factor = std::stod(text, &used);
    if (used < text.size() && text[used] == '/') {
      std::size_t more = 0;
      const std::string denominator = text.substr(used + 1);
      factor /= std::stod(denominator, &more);
      used += 1 + more;
    }
    if (used != text.size()) factor = 0;
  } catch (const std::exception&) {
    factor = 0;
  }
  if (!std::isfinite(factor) || factor <= 0)
    config_error(*key, "rescale must be a number above 0, or a fraction as 1/255 (got '" + text + "')");
  return factor;
}

std::string rescale_text(double factor) {
  const double inverse = 1.0 / factor;
  if (inverse > 10 && std::abs(inverse - std::round(inverse)) < 1e-9 * inverse)  // 1/255, not 0.00392157
    return "1/" + std::to_string(static_cast<std::int64_t>(std::round(inverse)));
  std::ostringstream out;
  out << factor;
  return out.str();
}

Tensor rescaled(const Tensor& inputs, double factor) {
  if (factor == 1.0) return inputs;
  if (inputs.dtype() != DType::f32 && inputs.dtype() != DType::i32 && inputs.dtype() != DType::i64)
    throw DTypeError("rescale: inputs " + inputs.describe() + " are not numbers it can scale");
  Tensor out = Tensor::empty(inputs.shape(), DType::f32);
  backend_for(Device::cpu()).cast(inputs, out);  // integers as floats (a copy for floats)
  float* values = out.data<float>();
  const auto f = static_cast<float>(factor);
  for (std::int64_t i = 0; i < out.numel(); ++i) values[i] *= f;
  return out;
}

Dataset load_dataset(ConfigNode spec) {
  Dataset d;
  try {
    d = load_dataset_of_type(spec);
  } catch (const DataError& e) {  // a file missing or malformed: say which config key named it
    throw DataError(spec.location() + ": " + spec.path() + ": " + e.what());
  }
  d.where = spec.location() + ": " + spec.path();  // errors about its samples point at its key
  return d;
}

std::unique_ptr<Trainer> make_trainer(RunConfig& run, VariableStore& store, ProcessGroup& processes, TrainerUse use) {
  const ProcessPlacement where = processes.placement();
  if (!run.distribution) {
    if (where.multi_process())
      throw ConfigError(run.root.location() + ": " + std::to_string(where.processes) +
                        " processes were started, but the config has no distribution: section to share the "
                        "work (each would train its own copy)");
    if (run.device.kind == DeviceKind::cuda) use_devices({run.device});  // cuda:N is GPU N, not a logical device
    run.model.build(store, run.training.seed);
    auto trainer = std::make_unique<Trainer>(run.model, run.training, store, run.device);
    if (use == TrainerUse::inference) trainer->fix_weights();
    return trainer;
  }
  DistributionConfig& config = *run.distribution;
  use_devices(config.distribution->mesh().devices(), config.shared_gpu);  // the logical devices of the mesh
  // In a job of several processes each device draws only its block of each
  // variable: no process holds a whole sharded variable (VariableStore). Under
  // a memory_limit nothing is drawn before the plan is checked against it.
  if (where.multi_process() || config.memory_limit > 0) store.defer_values(true);
  run.model.build(store, run.training.seed);
  bool zero = config.distribution->zero();  // kept when the layouts are chosen below
  const std::vector<Device> devices = config.distribution->mesh().devices();
  if (config.auto_mesh && !config.auto_choice) {  // the mesh and strategy the cost model predicts fastest
    config.auto_choice = choose_auto(run.model, run.training, devices, cached_calibration(), config.memory_limit);
    // Each process measured its own timings: process 0's choice stands for the
    // job, or the processes would partition differently and never meet.
    std::int64_t chosen = config.auto_choice->chosen ? static_cast<std::int64_t>(*config.auto_choice->chosen) : -1;
    processes.broadcast_from_first(std::as_writable_bytes(std::span(&chosen, 1)), config.collective_timeout);
    config.auto_choice->chosen =
        chosen < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(chosen));
    if (!config.auto_choice->chosen) {
      std::int64_t least = config.auto_choice->candidates.front().memory_bytes;
      for (const auto& c : config.auto_choice->candidates) least = std::min(least, c.memory_bytes);
      throw ConfigError(config.location + ": no mesh of " + std::to_string(devices.size()) +
                        " devices with any strategy fits memory_limit " + std::to_string(config.memory_limit) +
                        " bytes per device; the least any needs is " + std::to_string(least) + " bytes");
    }
  }
  if (config.auto_mesh) {  // the chosen candidate, as the cost model priced it
    const AutoCandidate& c = config.auto_choice->candidates[*config.auto_choice->chosen];
    DeviceMesh mesh({c.batch_devices, c.model_devices}, {"batch", "model"}, devices);
    config.distribution = make_strategy(c.strategy, mesh, run.model, store);
    zero = zero || c.strategy == Strategy::zero;  // the strategy the cost model priced
    if (c.strategy == Strategy::tp) config.auto_tp = plan_auto_tp(run.model, store, mesh, "model");
  }
  if (!config.auto_tp_axis.empty() && !config.auto_tp) {  // AutoTP: the layouts come from the layer graph
    const Distribution& placeholder = *config.distribution;
    config.auto_tp = plan_auto_tp(run.model, store, placeholder.mesh(), config.auto_tp_axis);
    config.distribution = std::make_unique<ModelParallel>(placeholder.mesh(), config.auto_tp->layout_map(),
                                                          placeholder.batch_dim_name());
  }
  config.distribution->set_zero(zero);
  try {
    config.distribution->set_placement(where);
  } catch (const LayoutError& e) {
    throw ConfigError(config.location + ": " + e.what());
  }
  // Each device of the batch axis takes an equal share of a batch, as in Keras.
  const Distribution& strategy = *config.distribution;
  const std::int64_t shares = strategy.mesh().axis_size(strategy.batch_dim_name());
  if (use == TrainerUse::training && run.training.batch_size % shares != 0) {
    std::string where_size = config.location;
    if (auto training = run.root.find("training"); training && training->has("batch_size"))
      where_size = (*training)["batch_size"].location() + ": " + (*training)["batch_size"].path();
    throw ConfigError(where_size + ": the batch size " + std::to_string(run.training.batch_size) +
                      " does not divide over the batch axis '" + strategy.batch_dim_name() + "' of " +
                      std::to_string(shares) + " devices (" + strategy.mesh().str() +
                      "): each takes an equal share; choose a batch size that is a multiple of " + std::to_string(shares));
  }
  // The model's own layouts, ahead of the layout map's keys.
  for (const auto& [path, entry] : run.model.declared_layouts()) {
    if (!config.auto_tp_axis.empty() || config.auto_mesh || config.distribution->kind() != Distribution::Kind::model_parallel)
      entry.fail("the model gives variable '" + path + "' a layout of its own, which needs type: model_parallel (" +
                 "the other types choose every variable's layout themselves)");
    if (store.find(path) == nullptr) {
      std::vector<std::string> known;
      for (const auto& v : store.variables()) known.push_back(v.path);
      entry.fail_unknown("variable", path, known);
    }
    config.distribution->pin_layout(path, parse_layout(entry, config.distribution->mesh()));
    config.key_locations[path] = entry.location() + ": " + entry.path();
  }
  // Every variable's layout is checked now, so that an error points at its layout-map entry.
  const Distribution& d = *config.distribution;
  for (const auto& v : store.variables()) {
    try {
      d.variable_layout(v.path, v.shape());
    } catch (const LayoutError& e) {
      // At the entry that matched, or at the map when two entries match.
      std::string where = run.distribution->map_location;
      try {
        if (auto match = d.layout_map().match(v.path)) where = run.distribution->key_locations.at(match->key);
      } catch (const LayoutError&) {
      }
      throw ConfigError(where + ": " + e.what());
    }
  }
  auto trainer = std::make_unique<Trainer>(run.model, run.training, store, *run.distribution->distribution, processes);
  if (use == TrainerUse::inference) trainer->fix_weights();
  trainer->set_collective_timeout(run.distribution->collective_timeout);
  if (config.memory_limit > 0 && use == TrainerUse::training) {  // planned, before any variable or workspace exists
    const std::int64_t planned = device_memory(*trainer->planned_program(run.training.batch_size));
    if (planned > config.memory_limit) {
      throw ConfigError(config.memory_limit_location + ": memory_limit: a training step of batch " +
                        std::to_string(run.training.batch_size) + " needs " + std::to_string(planned) + " bytes" +
                        (planned >= (1 << 20) ? " (" + std::to_string(planned >> 20) + " MiB)" : "") +
                        " on a device of " + config.distribution->str() + ", over the budget of " +
                        std::to_string(config.memory_limit) + " bytes: split the model over more devices, shard the " +
                        "optimizer state (zero: 1), lower the batch size, or raise memory_limit");
    }
  }
  return trainer;
}

}  // namespace tessera
