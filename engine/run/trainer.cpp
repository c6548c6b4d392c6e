#include "engine/run/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "backends/registry.hpp"
#include "distribution/spmd_program.hpp"
#include "engine/config/config.hpp"
#include "engine/data/batch_iterator.hpp"
#include "engine/data/validation_split.hpp"
#include "engine/graph/autodiff.hpp"
#include "engine/training/metrics.hpp"

namespace tessera {


TrainingSpec parse_training(ConfigNode node) {
  node.expect_keys({"loss", "optimizer", "metrics", "epochs", "batch_size", "steps_per_epoch", "seed", "shuffle",
                    "validation_split", "class_weight", "checkpoint", "precision", "callbacks"});
  TrainingSpec spec;
  spec.loss = parse_loss(node["loss"]);
  if (!node.has("optimizer")) node.set("optimizer", "adam");
  spec.optimizer = parse_optimizer(node["optimizer"]);
  spec.metrics = node.get<std::vector<std::string>>("metrics", {});
  for (std::size_t i = 0; i < spec.metrics.size(); ++i) {
    if (!is_metric(spec.metrics[i])) node["metrics"].at(i).fail_unknown("metric", spec.metrics[i], metric_names());
    if (const std::string why = metric_refusal(spec.metrics[i], spec.loss); !why.empty()) node["metrics"].at(i).fail(why);
  }
  if (auto split = node.find("validation_split")) {
    spec.validation_split = split->as<double>();
    if (!(spec.validation_split > 0 && spec.validation_split < 1))
      split->fail("validation_split is the fraction of the training samples held out: it must lie in (0, 1)");
  }
  if (auto weights = node.find("class_weight")) spec.class_weight = parse_class_weight(*weights);
  spec.epochs = node.get<std::int64_t>("epochs", 1);
  spec.batch_size = node.get<std::int64_t>("batch_size", 32);
  spec.seed = static_cast<std::uint64_t>(node.get<std::int64_t>("seed", 0));
  spec.shuffle = node.get<bool>("shuffle", true);
  if (auto precision = node.find("precision")) {
    const auto name = precision->as<std::string>();
    if (name == "bf16") spec.precision = DType::bf16;
    else if (name != "f32") precision->fail_unknown("precision", name, {"f32", "bf16"});
  }
  if (spec.epochs < 1) throw ConfigError(node["epochs"].location() + ": " + node["epochs"].path() + ": epochs must be >= 1");
  if (spec.batch_size < 1)
    throw ConfigError(node["batch_size"].location() + ": " + node["batch_size"].path() + ": batch_size must be >= 1");
  if (auto steps = node.find("steps_per_epoch")) {
    spec.steps_per_epoch = steps->as<std::int64_t>();
    if (spec.steps_per_epoch < 1) steps->fail("steps_per_epoch must be >= 1 (leave it out for every batch)");
  }
  if (auto callbacks = node.find("callbacks")) spec.callbacks = parse_callbacks(*callbacks);
  if (auto checkpoint = node.find("checkpoint")) {
    if (checkpoint->is_scalar() && checkpoint->as<std::string>() == "false") {
      spec.checkpoint.off = true;
    } else if (checkpoint->is_scalar()) {  // `checkpoint: runs/x`, every epoch
      spec.checkpoint.dir = checkpoint->resolve_path(checkpoint->as<std::string>());
    } else {
      checkpoint->expect_keys({"dir", "every_epochs"});
      ConfigNode dir = (*checkpoint)["dir"];
      spec.checkpoint.dir = dir.resolve_path(dir.as<std::string>());
      spec.checkpoint.every_epochs = checkpoint->get<std::int64_t>("every_epochs", 1);
      if (spec.checkpoint.every_epochs < 1) (*checkpoint)["every_epochs"].fail("every_epochs must be >= 1");
    }
    if (!spec.checkpoint.off && spec.checkpoint.dir.filename().empty())
      spec.checkpoint.dir = spec.checkpoint.dir.parent_path();
  }
  return spec;
}

// One traced program: the model for a batch size, with loss and (for
// training) gradients and updates, bound to the store's variables.
struct Trainer::Program {
  Graph graph;
  ValueId input = -1, target = -1, weight = -1, loss = -1, output = -1;  // weight: -1 unless weighted
  std::vector<MetricOps> metrics;      // with a loss: one per spec.metrics entry
  std::unique_ptr<StepRunner> runner;  // an Executor on one device, an SpmdProgram on a mesh
  TracedStep step{.graph = graph, .outputs = {}, .input = -1, .target = -1, .sample_weight = -1,
                  .model_variables = {}, .variables = {}, .layer_outputs = {}};  // what the host places
  std::vector<std::pair<ValueId, Tensor>> constants;  // bound once the runner exists
};

struct Trainer::NonFiniteLoss : Error {
  NonFiniteLoss(std::string value, std::int64_t step)
      : Error("training stopped: the loss is " + value + " at step " + std::to_string(step) +
              "; lower the learning rate or clip gradients"),
        loss(std::move(value)) {}
  std::string loss;  // as printed: nan, inf, -inf
};

Trainer::Trainer(const Model& model, TrainingSpec spec, VariableStore& store, std::unique_ptr<StepHost> host)
    : model_(model), spec_(std::move(spec)), store_(store), host_(std::move(host)) {
  if (model_.inputs().size() != 1)
    throw UnsupportedError("the trainer feeds models with one input; '" + model_.name() + "' has " +
                           std::to_string(model_.inputs().size()));
}

Trainer::Trainer(const Model& model, TrainingSpec spec, VariableStore& store, Device device)
    : Trainer(model, std::move(spec), store, device_host(store, device)) {}

Trainer::Trainer(const Model& model, TrainingSpec spec, VariableStore& store, const Distribution& distribution,
                 ProcessGroup& processes)
    : Trainer(model, std::move(spec), store, mesh_host(store, distribution, processes)) {}

Trainer::~Trainer() = default;

void Trainer::sync_store() { host_->sync_store(); }

const Communicator* Trainer::communicator() const { return host_->communicator(); }
Communicator* Trainer::communicator() { return host_->communicator(); }

const SpmdProgram* Trainer::sharded_program(std::int64_t batch) {
  if (host_->communicator() == nullptr) return nullptr;  // one device: nothing to partition
  return dynamic_cast<const SpmdProgram*>(program(batch, /*training=*/true, /*with_loss=*/true).runner.get());
}

void Trainer::set_collective_timeout(std::chrono::milliseconds timeout) {
  if (Communicator* comm = host_->communicator()) comm->set_timeout(timeout);
}

void Trainer::enable_profiling(std::map<std::string, StepRunner::OpTime>* sink) {
  profile_ = sink;
  for (auto& [key, p] : programs_) p->runner->enable_profiling(sink);
}

void Trainer::weights_changed() { host_->store_changed(); }

std::shared_ptr<KeptCopies> Trainer::kept_copies() const { return host_->kept_copies(); }

namespace {

// The callbacks that keep counts, by key (Callback::state_key); a key that
// several share is numbered from its second ("early_stopping val_loss #2").
std::vector<std::pair<std::string, Callback*>> keyed(const std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::vector<std::pair<std::string, Callback*>> out;
  std::map<std::string, int> seen;
  for (const auto& c : callbacks) {
    std::string key = c->state_key();
    if (key.empty()) continue;
    if (const int n = ++seen[key]; n > 1) key += " #" + std::to_string(n);
    out.emplace_back(std::move(key), c.get());
  }
  return out;
}

}  // namespace

void Trainer::save_run(const FitCallbacks& callbacks) {
  const CheckpointSpec& checkpoint = spec_.checkpoint;
  TrainingState now = state();
  host_->save(checkpoint.dir, now, checkpoint.resolved_config);
  if (callbacks.on_checkpoint) callbacks.on_checkpoint(checkpoint.dir, now);
}

void Trainer::resume(const TrainingState& state) {
  host_->store_changed();  // the store holds the checkpoint's values now, unless load() read them; even if refused below
  if (state.seed != spec_.seed)
    throw CheckpointError("cannot resume: the checkpoint was trained with seed " + std::to_string(state.seed) +
                          " but training.seed is " + std::to_string(spec_.seed) +
                          ", which would change the data order (set training.seed=" +
                          std::to_string(state.seed) + ")");
  if (state.step < 0 || state.epoch < 0 || state.batch < 0)
    throw CheckpointError("cannot resume from a negative position (step " + std::to_string(state.step) +
                          ", epoch " + std::to_string(state.epoch) + ", batch " + std::to_string(state.batch) + ")");
  if (!std::isfinite(state.learning_rate_scale) || state.learning_rate_scale <= 0)
    throw CheckpointError("cannot resume with a learning-rate factor of " + std::to_string(state.learning_rate_scale) +
                          " (a positive number)");
  // A position inside an epoch counts batches: of another size they would skip or repeat samples.
  if (state.batch > 0 && state.epoch_sums && state.epoch_sums->samples != state.batch * spec_.batch_size) {
    const std::string saved_batch = std::to_string(state.epoch_sums->samples / state.batch);
    throw CheckpointError("cannot resume at batch " + std::to_string(state.batch) + " of epoch " +
                          std::to_string(state.epoch + 1) + " with training.batch_size " +
                          std::to_string(spec_.batch_size) + ": the checkpoint was saved after " +
                          std::to_string(state.epoch_sums->samples) + " samples of that epoch, in batches of " +
                          saved_batch + ", and batches of another size would skip or repeat samples (set "
                          "training.batch_size=" + saved_batch + ", or resume from a checkpoint saved at an epoch's end)");
  }
  step_ = state.step;
  start_epoch_ = epochs_done_ = state.epoch;
  start_batch_ = batches_done_ = state.batch;
  learning_rate_scale_ = state.learning_rate_scale;
  last_figures_ = state.figures;
  fit_callbacks_.clear();  // an earlier fit()'s counts are not this run's
  resumed_counts_ = state.callbacks;
  epoch_totals_ = {};
  carried_totals_.reset();
  if (state.batch > 0 && state.epoch_sums)
    carried_totals_ = PassTotals{.loss = state.epoch_sums->loss, .samples = state.epoch_sums->samples,
                                 .sums = state.epoch_sums->metrics};
}

TrainingState Trainer::load(const std::filesystem::path& dir, NonFinite non_finite) { return host_->load(dir, non_finite); }

TrainingState Trainer::state() const {
  std::optional<EpochSums> sums;
  // Mid-epoch: the sums of its batches so far (resumed and not stepped yet: the ones it resumed with).
  const PassTotals& so_far = epoch_totals_.samples == 0 && carried_totals_ ? *carried_totals_ : epoch_totals_;
  if (batches_done_ > 0 && so_far.samples > 0)
    sums = EpochSums{.loss = so_far.loss, .samples = so_far.samples, .metrics = so_far.sums};
  TrainingState state{.step = step_,
                      .epoch = epochs_done_,
                      .batch = batches_done_,
                      .seed = spec_.seed,
                      .config = {},
                      .learning_rate_scale = learning_rate_scale_,
                      .figures = last_figures_,
                      .epoch_sums = std::move(sums),
                      .callbacks = {}};
  if (!resumed_counts_.empty()) {
    state.callbacks = resumed_counts_;  // resumed, not fit yet: what it resumed with
  } else {
    for (const auto& [key, c] : keyed(fit_callbacks_)) state.callbacks[key] = c->counts();
  }
  return state;
}

std::shared_ptr<const SpmdProgram> Trainer::planned_program(std::int64_t batch) {
  std::shared_ptr<Program> p = traced_program(batch, /*training=*/true, /*with_loss=*/true);
  p->runner = host_->unbound_runner(p->step);
  const auto* spmd = dynamic_cast<const SpmdProgram*>(p->runner.get());
  if (spmd == nullptr) return nullptr;
  return {p, spmd};  // keeps the traced graph the program refers to alive
}

Trainer::Program& Trainer::program(std::int64_t batch, bool training, bool with_loss, bool weighted) {
  if (training && weights_fixed_)
    throw Error("this trainer runs inference only (its weights are fixed: fix_weights), so it takes no training step");
  auto key = std::make_tuple(batch, training, with_loss, weighted);
  auto& slot = programs_[key];
  if (slot) return *slot;
  std::unique_ptr<Program> p = traced_program(batch, training, with_loss, weighted);
  p->runner = host_->runner(p->step);
  p->runner->enable_profiling(profile_);
  for (const auto& [id, value] : p->constants) p->runner->bind(id, value);
  slot = std::move(p);
  if (with_loss) metric_ops_ = &slot->metrics;  // any program's do: their values depend on per-sample sizes alone
  return *slot;
}

std::unique_ptr<Trainer::Program> Trainer::traced_program(std::int64_t batch, bool training, bool with_loss,
                                                          bool weighted) {
  auto p = std::make_unique<Program>();
  Graph& g = p->graph;
  g.set_matmul_dtype(spec_.precision);
  // Training's attention as one op with its gradient where the device has
  // the kernels; inference keeps matmul, softmax and matmul, which the memory
  // plan fuses into one call where it can (fusion.hpp) and folds the head
  // transposes and casts around into.
  if (training) g.set_attention_kernel(host_->attention_kernel());
  Model::Traced traced = model_.trace(g, batch, training, store_, spec_.seed);
  p->input = traced.inputs[0];
  p->output = traced.output;
  TracedStep& step = p->step;
  step.input = p->input;
  step.model_variables = step.variables = traced.variables;
  step.fixed_variables = weights_fixed_ && !training;
  // Training reads only the loss and the metrics: not asking for the model's
  // output spares a sharded run gathering it (a vocabulary-parallel head's logits).
  if (!with_loss) step.outputs.push_back(p->output);
  if (with_loss) {
    Shape per_sample = g.shape(p->output);
    Shape target = loss_target_shape(spec_.loss, per_sample);
    p->target = step.target = g.input("target", target, loss_target_dtype(spec_.loss));
    if (weighted) p->weight = step.sample_weight = g.input("sample_weight", {batch});
    p->loss = build_loss(g, spec_.loss, p->output, p->target, p->weight);
    // Keras adds the regularizers' penalties to the loss it reports, in evaluation too.
    if (!traced.regularized.empty()) p->loss = g.add(p->loss, regularization_penalty(g, traced.regularized));
    step.outputs.push_back(p->loss);
    p->metrics = build_metrics(g, spec_.metrics, spec_.loss, p->output, p->target, p->constants);
    for (const MetricOps& metric : p->metrics) step.outputs.insert(step.outputs.end(), metric.sums.begin(), metric.sums.end());
  }
  if (training) {
    std::vector<std::pair<std::string, ValueId>> params;
    std::vector<ValueId> wrt;
    for (const auto& [path, id] : traced.variables)
      if (store_.find(path)->trainable) {
        params.emplace_back(path, id);
        wrt.push_back(id);
      }
    auto grads = append_gradients(g, p->loss, wrt);
    append_updates(g, spec_.optimizer, params, grads, store_, step.variables);
  }
  step.layer_outputs = traced.layer_outputs;
  return p;
}

namespace {

// Integer inputs in the model input's dtype: any integer width for integer
// inputs (numpy's default int64 tokens) where every value fits, and integers
// as floats for float inputs (uint8 images). Floats never become integers.
// `consumer` names what takes them in messages: "model input 'x'".
Tensor converted_input(const Tensor& inputs, DType to, const std::string& label, const std::string& consumer) {
  if (inputs.dtype() == to) return inputs;
  auto refuse = [&](const std::string& why) {
    return DTypeError(label + " has " + inputs.describe() + " but " + consumer + " takes " + std::string(dtype_name(to)) + why);
  };
  if (is_floating(inputs.dtype()) || inputs.device().kind != DeviceKind::cpu) throw refuse("");
  // The backend's cast wraps i64 into i32: check that every value fits first.
  if (inputs.dtype() == DType::i64 && to == DType::i32)
    for (std::int64_t i = 0; i < inputs.numel(); ++i)
      if (const std::int64_t value = inputs.data<std::int64_t>()[i];
          value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max())
        throw refuse(", and its element " + std::to_string(i) + " (" + std::to_string(value) + ") does not fit in it");
  Tensor out = Tensor::empty(inputs.shape(), to);
  backend_for(Device::cpu()).cast(inputs, out);
  return out;
}

}  // namespace

Tensor Trainer::as_model_input(const Tensor& raw, const std::string& label) const {
  const ModelInput& in = model_.inputs()[0];
  const Tensor inputs = converted_input(raw, in.dtype, label, "model input '" + in.name + "'");
  std::int64_t n = inputs.rank() > 0 ? inputs.shape()[0] : 0;
  // Samples whose element count matches are viewed in the model's input shape
  // (28x28 IDX images feed a [784] input or a [28, 28, 1] one).
  if (n == 0 || inputs.numel() / n != in.shape.numel()) {
    const auto& dims = inputs.shape().dims();
    const Shape sample(std::vector<std::int64_t>(dims.begin() + (dims.empty() ? 0 : 1), dims.end()));
    throw ShapeError(label + " has " + std::to_string(n) + " samples of shape " + sample.str() + " (" +
                     std::to_string(sample.numel()) + " values each) but model input '" + in.name + "' takes " +
                     in.shape.str() + " (" + std::to_string(in.shape.numel()) + " values)");
  }
  auto dims = in.shape.dims();
  dims.insert(dims.begin(), n);
  return inputs.reshape(Shape(dims));
}

Dataset Trainer::model_dataset(const Dataset& data, bool evaluated, bool class_weighted) {
  const Tensor inputs = as_model_input(data.inputs, data.label());
  const std::int64_t n = inputs.shape()[0];
  class_weighted = class_weighted && !spec_.class_weight.empty();
  const bool weighted = data.weights.defined() || class_weighted;
  // What the loss takes: from the evaluation program (made now, cached, and
  // partitioned, so its layout and memory errors come before training too),
  // or, for data only trained on, from a trace that allocates nothing.
  const std::int64_t batch = std::min(n, spec_.batch_size);
  std::unique_ptr<Program> traced;
  const Program& p = evaluated ? program(batch, /*training=*/false, /*with_loss=*/true, weighted)
                               : *(traced = traced_program(batch, /*training=*/false, /*with_loss=*/true, weighted));
  std::vector<std::int64_t> dims = p.graph.shape(p.target).dims();
  dims[0] = n;
  const DType want = p.graph.dtype(p.target);
  auto refuse = [&](const std::string& why) {
    const Tensor& t = data.targets;
    return ShapeError(data.label() + " has targets " + (t.defined() ? t.describe() : std::string("none")) + " for " +
                      std::to_string(n) + " samples, but the loss " + spec_.loss.type + " takes " +
                      std::string(dtype_name(want)) + Shape(dims).str() + why);
  };
  if (!data.targets.defined() || data.targets.rank() == 0 || data.targets.shape()[0] != n ||
      data.targets.numel() != Shape(dims).numel())
    throw refuse("");
  Tensor targets = data.targets;
  if (targets.dtype() != want) {
    if (want == DType::i32 && targets.dtype() == DType::f32) {  // class ids written as floats ("3.0")
      Tensor ids = Tensor::empty(targets.shape(), DType::i32);
      for (std::int64_t i = 0; i < targets.numel(); ++i) {
        const float v = targets.data<float>()[i];
        if (!(v >= 0 && v == std::floor(v) && v < 2147483648.0f))  // 2^31: the first float past int32
          throw refuse(": class ids, and element " + std::to_string(i) + " is " + std::to_string(v) +
                       " (a regression target needs a loss such as mse)");
        ids.data<std::int32_t>()[i] = static_cast<std::int32_t>(v);
      }
      targets = ids;
    } else {
      targets = converted_input(targets, want, data.label() + "'s targets", "the loss " + spec_.loss.type);
    }
  }
  Dataset out{inputs, targets.reshape(Shape(dims)), data.source, data.where};
  if (weighted) {
    const std::vector<std::int64_t> batch_output = p.graph.shape(p.output).dims();
    const Shape per_sample(std::vector<std::int64_t>(batch_output.begin() + 1, batch_output.end()));
    out.weights = sample_weights(data, out.targets, class_weighted ? &spec_.class_weight : nullptr, per_sample);
  }
  return out;
}

void Trainer::accumulate(PassTotals& total, const Program& p, std::int64_t batch) const {
  total.samples += batch;
  total.loss += static_cast<double>(p.runner->output(p.loss).to_vector<float>()[0]) * static_cast<double>(batch);
  total.sums.resize(p.metrics.size());
  for (std::size_t m = 0; m < p.metrics.size(); ++m) {
    total.sums[m].resize(p.metrics[m].sums.size());
    for (std::size_t s = 0; s < p.metrics[m].sums.size(); ++s) {
      const std::vector<float> value = p.runner->output(p.metrics[m].sums[s]).to_vector<float>();  // from any device
      std::vector<double>& sum = total.sums[m][s];
      sum.resize(value.size());
      for (std::size_t i = 0; i < value.size(); ++i) sum[i] += value[i];
    }
  }
}

Evaluation Trainer::evaluation(const PassTotals& totals) const {
  return totals.evaluation(spec_.metrics, metric_ops_ != nullptr ? *metric_ops_ : std::vector<MetricOps>{});
}

class Trainer::FitRun final : public FitControl {
 public:
  FitRun(Trainer& trainer, bool validation, std::int64_t first_epoch)
      : t_(trainer), validation_(validation), first_epoch_(first_epoch) {}

  std::vector<std::string> log_names() const override {
    std::vector<std::string> names = {"loss"};
    names.insert(names.end(), t_.spec_.metrics.begin(), t_.spec_.metrics.end());
    if (validation_)
      for (std::size_t i = 0, n = names.size(); i < n; ++i) names.push_back("val_" + names[i]);
    return names;
  }
  std::int64_t first_epoch() const override { return first_epoch_; }
  void stop_training() override { stop = true; }
  double learning_rate_scale() const override { return t_.learning_rate_scale_; }
  void set_learning_rate_scale(double scale) override {
    if (!std::isfinite(scale) || scale <= 0)
      throw Error("set_learning_rate_scale: the factor must be a positive number, not " + std::to_string(scale));
    t_.learning_rate_scale_ = scale;
  }
  double learning_rate() const override {
    return learning_rate_at(t_.spec_.optimizer, t_.step_, t_.total_steps_) * t_.learning_rate_scale_;
  }
  void save_checkpoint(const std::filesystem::path& dir) override {
    if (std::find(pending_saves_.begin(), pending_saves_.end(), dir) == pending_saves_.end()) pending_saves_.push_back(dir);
  }
  // The saves asked for during this epoch's on_epoch_end, made once every
  // callback has seen the epoch: the checkpoints hold all their counts of it
  // (and the rate a later reduce_lr_on_plateau set), whatever their order.
  void save_pending() {
    std::vector<std::filesystem::path> saves;
    saves.swap(pending_saves_);
    for (const auto& dir : saves) t_.host_->save(dir, t_.state(), t_.spec_.checkpoint.resolved_config);
  }
  void check_checkpoint_dir(const std::filesystem::path& dir) const override { tessera::check_checkpoint_dir(dir); }
  std::optional<SavedEpoch> saved_epoch(const std::filesystem::path& dir) const override {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec) || std::filesystem::is_empty(dir, ec)) return std::nullopt;
    TrainingState saved = read_training_state(dir);
    return SavedEpoch{.epoch = saved.epoch, .figures = std::move(saved.figures)};
  }
  WeightSnapshot weights() override {
    check_whole();
    t_.sync_store();
    WeightSnapshot snapshot;
    for (Variable& v : t_.store_.variables()) {
      if (v.path.rfind("optimizer/", 0) == 0) continue;
      const Tensor& value = VariableStore::materialize(v);
      const auto* bytes = static_cast<const std::byte*>(value.raw_data());
      snapshot.variables.emplace_back(v.path, std::vector<std::byte>(bytes, bytes + value.nbytes()));
    }
    return snapshot;
  }
  void set_weights(const WeightSnapshot& snapshot) override {
    check_whole();
    for (const auto& [path, bytes] : snapshot.variables) {
      Variable* v = t_.store_.find(path);
      if (v == nullptr || VariableStore::materialize(*v).nbytes() != bytes.size())
        throw Error("set_weights: variable '" + path + "' is not in this model, or not of that size");
      std::memcpy(v->value.raw_data(), bytes.data(), bytes.size());
    }
    t_.host_->store_changed();
  }

  bool stop = false;

 private:
  std::vector<std::filesystem::path> pending_saves_;
  // A job of several processes keeps its variables as each process's blocks.
  void check_whole() const {
    if (t_.store_.defers_values())
      throw UnsupportedError(
          "restoring weights in a job of several processes: save the best epoch with model_checkpoint "
          "(save_best_only: true) and load that checkpoint instead");
  }

  Trainer& t_;
  bool validation_;
  std::int64_t first_epoch_;
};

std::vector<EpochLog> Trainer::fit(const Dataset& train, const Dataset* validation,
                                   const FitCallbacks& callbacks) {
  // Keras' validation_split: the last samples, before shuffling.
  std::optional<std::pair<Dataset, Dataset>> split;
  if (spec_.validation_split > 0) {
    if (validation != nullptr)
      throw Error("fit: training.validation_split holds out part of the training data for validation, and "
                  "validation data was given too: use one or the other");
    split = split_validation(train, spec_.validation_split);
    validation = &split->second;
  }
  // What would fail at the first step, or after the first epoch, fails
  // before any, losing no training.
  const Dataset data = model_dataset(split ? split->first : train, /*evaluated=*/false, /*class_weighted=*/true);
  std::optional<Dataset> checked_validation;
  if (validation != nullptr) checked_validation = model_dataset(*validation, /*evaluated=*/true);
  if (!spec_.checkpoint.dir.empty()) check_checkpoint_dir(spec_.checkpoint.dir);
  BatchIterator batches(data, spec_.batch_size, spec_.shuffle, spec_.seed, /*drop_remainder=*/false, {}, host_->row_window());
  std::int64_t per_epoch = (data.size() + spec_.batch_size - 1) / spec_.batch_size;
  if (spec_.steps_per_epoch > 0) per_epoch = std::min(per_epoch, spec_.steps_per_epoch);
  total_steps_ = per_epoch * spec_.epochs;
  // Where to begin: epoch 1, or the position resume() gave (used once).
  std::int64_t first_epoch = start_epoch_ + 1, first_batch = start_batch_;
  start_epoch_ = start_batch_ = 0;
  const std::map<std::string, CallbackCounts> resumed_counts = std::move(resumed_counts_);
  resumed_counts_.clear();
  if (first_batch > per_epoch)
    throw CheckpointError("cannot resume at batch " + std::to_string(first_batch) + " of epoch " +
                          std::to_string(first_epoch) + ": an epoch of " + std::to_string(data.size()) +
                          " samples in batches of " + std::to_string(spec_.batch_size) + " has " +
                          std::to_string(per_epoch) + " batches" +
                          (spec_.steps_per_epoch > 0 ? " (training.steps_per_epoch " + std::to_string(spec_.steps_per_epoch) + ")" : "") +
                          " (did the data, the batch size or steps_per_epoch change?)");
  if (first_batch == per_epoch) {  // saved at the very end of an epoch
    ++first_epoch;
    first_batch = 0;
  }
  epochs_done_ = first_epoch - 1;
  batches_done_ = first_batch;
  FitRun run(*this, checked_validation.has_value(), first_epoch);
  fit_callbacks_ = spec_.callbacks;
  fit_callbacks_.insert(fit_callbacks_.end(), callbacks.callbacks.begin(), callbacks.callbacks.end());
  for (const auto& c : fit_callbacks_) c->on_train_begin(run);
  // Resumed: the callbacks go on counting where the checkpoint's run was.
  if (first_epoch > 1)
    for (const auto& [key, c] : keyed(fit_callbacks_)) {
      const auto counts = resumed_counts.find(key);
      c->resume_counts(counts == resumed_counts.end() ? CallbackCounts{} : counts->second, run);
    }
  std::vector<EpochLog> logs;
  for (std::int64_t epoch = first_epoch; epoch <= spec_.epochs && !run.stop; ++epoch) {
    auto start = std::chrono::steady_clock::now();
    EpochLog log;
    log.epoch = epoch;
    const std::int64_t skip = epoch == first_epoch ? first_batch : 0;
    batches.seek(epoch - 1, skip);  // the order of epoch e is a function of (seed, e) alone
    Batch batch;
    PassTotals& totals = epoch_totals_;  // state() saves it mid-epoch
    totals = {};
    // Resumed in the middle of this epoch: its first batches' sums, where
    // they are of the metrics this run computes (else the log covers the rest only).
    std::optional<PassTotals> carried = skip > 0 ? std::move(carried_totals_) : std::nullopt;
    carried_totals_.reset();
    bool interrupted = false;  // callbacks.interrupted's answer after the last step
    for (std::int64_t b = skip; b < per_epoch && batches.next(batch); ++b) {
      try {
        PassTotals step = run_step(batch.inputs, batch.targets, batch.weights, batch.size, batch.first_row);
        if (carried && carried->same_metrics(step)) totals = std::move(*carried);
        carried.reset();
        totals.add(step);
      } catch (const NonFiniteLoss& e) {
        batches_done_ = b + 1;
        throw Error("training stopped: the loss is " + e.loss + " at epoch " + std::to_string(epoch) +
                    ", batch " + std::to_string(b + 1) + " (step " + std::to_string(step_) +
                    "); lower the learning rate or clip gradients");
      }
      batches_done_ = b + 1;
      if (callbacks.on_batch) callbacks.on_batch(epoch, b + 1, per_epoch, evaluation(totals));
      interrupted = callbacks.interrupted && callbacks.interrupted();
      if (interrupted && b + 1 < per_epoch) {
        if (spec_.checkpoint.dir.empty()) sync_store();  // (a save writes the store back itself)
        else save_run(callbacks);
        return logs;
      }
    }
    log.train = evaluation(totals);
    if (checked_validation) {
      log.validation = pass(*checked_validation, {});
      interrupted = interrupted || (callbacks.interrupted && callbacks.interrupted());  // during the pass
    }
    log.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    log.learning_rate = learning_rate_at(spec_.optimizer, step_ - 1, total_steps_) * learning_rate_scale_;
    epochs_done_ = epoch;
    batches_done_ = 0;
    last_figures_.clear();
    for (const std::string& name : run.log_names())
      if (const auto value = log_value(log, name)) last_figures_[name] = *value;
    if (callbacks.on_epoch) callbacks.on_epoch(log);
    for (const auto& c : fit_callbacks_) c->on_epoch_end(log, run);
    run.save_pending();
    logs.push_back(log);
    const CheckpointSpec& checkpoint = spec_.checkpoint;
    // Interrupted at an epoch's last batch: the epoch is whole, and saved as any last epoch.
    if (!checkpoint.dir.empty() &&
        (epoch % checkpoint.every_epochs == 0 || epoch == spec_.epochs || run.stop || interrupted))
      save_run(callbacks);
    if (run.stop || interrupted) break;
  }
  sync_store();
  return logs;
}

Evaluation Trainer::evaluate(const Dataset& dataset, const PassCallback& on_batch) {
  return pass(model_dataset(dataset, /*evaluated=*/true), on_batch);
}

Evaluation Trainer::pass(const Dataset& data, const PassCallback& on_batch) {
  BatchIterator batches(data, spec_.batch_size, /*shuffle=*/false, 0, /*drop_remainder=*/false, {}, host_->row_window());
  batches.start_epoch(0);
  PassTotals total;
  Batch batch;
  std::int64_t done = 0;
  while (batches.next(batch)) {
    Program& p = program(batch.size, /*training=*/false, /*with_loss=*/true, batch.weights.defined());
    p.runner->bind_rows(p.input, batch.inputs, batch.first_row);
    p.runner->bind_rows(p.target, batch.targets, batch.first_row);
    if (p.weight >= 0) p.runner->bind_rows(p.weight, batch.weights, batch.first_row);
    p.runner->run();
    accumulate(total, p, batch.size);
    if (on_batch) on_batch(++done, batches.batches_per_epoch(), evaluation(total));
  }
  return evaluation(total);
}

Evaluation Trainer::train_step(const Tensor& raw_inputs, const Tensor& targets, const Tensor& sample_weights) {
  Tensor inputs = as_model_input(raw_inputs, "data 'train_step inputs'");
  const std::int64_t n = inputs.shape()[0];
  if (sample_weights.defined() && (sample_weights.shape() != Shape{n} || sample_weights.dtype() != DType::f32))
    throw ShapeError("train_step: sample weights " + sample_weights.describe() + " for " + std::to_string(n) +
                     " samples: give f32[" + std::to_string(n) + "]");
  return evaluation(run_step(inputs, targets, sample_weights, n, 0));
}

PassTotals Trainer::run_step(const Tensor& inputs, const Tensor& targets, const Tensor& weights, std::int64_t n,
                             std::int64_t first_row) {
  Program& p = program(n, /*training=*/true, /*with_loss=*/true, weights.defined());
  p.runner->bind_rows(p.input, inputs, first_row);
  p.runner->bind_rows(p.target, targets, first_row);
  if (p.weight >= 0) p.runner->bind_rows(p.weight, weights, first_row);
  p.runner->set_update_step(step_ + 1, static_cast<float>(learning_rate_at(spec_.optimizer, step_, total_steps_) *
                                                         learning_rate_scale_));
  p.runner->run();
  ++step_;
  PassTotals result;
  accumulate(result, p, n);  // reads the loss and metrics once
  const double loss = result.loss / static_cast<double>(n);
  if (!std::isfinite(loss)) throw NonFiniteLoss(std::to_string(loss), step_);
  return result;
}

Tensor Trainer::forward(const Tensor& raw_inputs) {
  Tensor inputs = as_model_input(raw_inputs, "data 'forward inputs'");
  Program& p = program(inputs.shape()[0], /*training=*/false, /*with_loss=*/false);
  p.runner->bind(p.input, inputs);
  p.runner->run();
  return p.runner->output(p.output);
}

Tensor Trainer::predict(const Tensor& raw_inputs, const PassCallback& on_batch) {
  Tensor inputs = as_model_input(raw_inputs, "data 'predict inputs'");
  std::int64_t n = inputs.shape()[0];
  Tensor result;
  for (std::int64_t start = 0; start < n; start += spec_.batch_size) {
    std::int64_t size = std::min(spec_.batch_size, n - start);
    Tensor out = forward(inputs.rows(start, size));
    if (!result.defined()) {
      auto out_dims = out.shape().dims();
      out_dims[0] = n;
      result = Tensor::empty(Shape(out_dims), out.dtype());
    }
    std::memcpy(result.rows(start, size).raw_data(), out.raw_data(), out.nbytes());
    if (on_batch) on_batch(start / spec_.batch_size + 1, (n + spec_.batch_size - 1) / spec_.batch_size,
                           Evaluation{.loss = 0, .metrics = {}, .samples = start + size});
  }
  return result;
}

}  // namespace tessera
