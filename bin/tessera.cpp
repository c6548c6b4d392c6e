// The `tessera` command-line program. Every engine error is caught here and
// mapped to an exit code in one place (see exit_code_for).
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include "backends/registry.hpp"
#include "bin/distribution_report.hpp"
#include "bin/progress.hpp"
#include "bin/resume_command.hpp"
#include "bin/run_folder.hpp"
#include "bin/sharding_bench.hpp"
#include "bin/usage_hints.hpp"
#include "distribution/calibration_cache.hpp"
#include "distribution/collectives/mpi_session.hpp"
#include "distribution/collectives/process_group.hpp"
#include "engine/checkpoint/checkpoint.hpp"
#include "engine/checkpoint/safetensors.hpp"
#include "engine/checkpoint/sharded_checkpoint.hpp"
#include "engine/config/config.hpp"
#include "engine/core/printable.hpp"
#include "engine/data/idx.hpp"
#include "engine/data/npy.hpp"
#include "engine/data/validation_split.hpp"
#include "engine/run/inference_model.hpp"
#include "engine/run/interrupt.hpp"
#include "engine/run/run_config.hpp"
#include <unistd.h>

namespace {

using namespace tessera;

enum ExitCode { kOk = 0, kFailed = 1, kUsage = 2, kBadInput = 3, kUnsupported = 4 };

// The one place that maps engine errors to a label and an exit code: bad input
// (config, data, checkpoint, shapes, dtypes, devices) is 3, a missing feature 4.
template <typename T>
bool is(const std::exception& e) {
  return dynamic_cast<const T*>(&e) != nullptr;
}

std::pair<const char*, int> classify(const std::exception& e) {
  if (is<ConfigError>(e)) return {"config error", kBadInput};
  if (is<DataError>(e)) return {"data error", kBadInput};
  if (is<CheckpointError>(e)) return {"checkpoint error", kBadInput};
  if (is<ShapeError>(e)) return {"shape error", kBadInput};
  if (is<DTypeError>(e)) return {"dtype error", kBadInput};
  if (is<DeviceError>(e)) return {"device error", kBadInput};
  if (is<LayoutError>(e)) return {"layout error", kBadInput};
  if (is<CollectiveError>(e)) return {"collective error", kFailed};
  if (is<OutOfMemoryError>(e)) return {"out of memory", kFailed};
  if (is<UnsupportedError>(e)) return {"unsupported", kUnsupported};
  return {"error", kFailed};
}

int devices(int cpu_devices) {
  set_cpu_device_count(cpu_devices);
  fmt::print("CUDA backend compiled: {}\n", cuda_compiled() ? "yes" : "no");
  for (const auto& d : available_devices()) fmt::print("{}  ({})\n", d.str(), backend_for(d).name());
  return kOk;
}

// Whether progress may redraw a bar in place: stdout is a terminal, and not
// one that mpirun made (it gives its ranks terminals of their own whatever
// its own output is, a pipe or a log included).
bool terminal_output() { return isatty(STDOUT_FILENO) != 0 && !MpiSession::launched_by_mpirun(); }

// The run config, with the warnings its reading found (as Keras warns) on stderr.
RunConfig load_config(const std::string& file, const std::vector<std::string>& overrides) {
  RunConfig run = load_run_config(file, overrides);
  if (run.distribution)
    for (const auto& warning : run.distribution->warnings) fmt::print(stderr, "warning: {}\n", warning);
  return run;
}

int inspect(const std::string& file, const std::vector<std::string>& overrides, bool resolved,
            const std::string& visualize) {
  RunConfig run = load_config(file, overrides);
  VariableStore store;
  fmt::print("{}", run.model.summary(store, run.training.seed));
  // The preprocessing the data gets before the model sees it: said, not silent.
  for (const auto& [split, spec] : {std::pair{"train", run.train_data}, std::pair{"validation", run.validation_data}})
    if (spec && input_rescale(*spec) != 1.0)
      fmt::print("Data: data.{} inputs are multiplied by {} before the model (rescale:{})\n", split,
                 rescale_text(input_rescale(*spec)), spec->has("rescale") ? "" : ", the default of its type");
  fmt::print("\n{:<48} {:<16} {:<6} {:>12}\n", "Variable", "Shape", "DType", "Bytes");
  std::int64_t bytes = 0;
  for (const auto& v : store.variables()) {
    fmt::print("{:<48} {:<16} {:<6} {:>12}\n", v.path, v.value.shape().str(), dtype_name(v.value.dtype()),
               v.value.nbytes());
    bytes += static_cast<std::int64_t>(v.value.nbytes());
  }
  const std::int64_t all = store.parameter_count(false), trainable = store.parameter_count();
  fmt::print("Total: {} parameters ({} trainable, {} non-trainable), {} bytes\n", all, trainable, all - trainable, bytes);
  if (run.distribution) {
    // The training program of one batch, partitioned (not run): what each device holds and sends.
    auto trainer = make_trainer(run, store);
    const SpmdProgram& program = *trainer->sharded_program(run.training.batch_size);
    const Distribution& distribution = *run.distribution->distribution;
    const AutoTpPlan* auto_tp = run.distribution->auto_tp ? &*run.distribution->auto_tp : nullptr;
    if (run.distribution->auto_choice) print_auto_choice(*run.distribution->auto_choice, run.distribution->memory_limit);
    if (auto_tp != nullptr) print_auto_tp(*auto_tp);
    print_sharding(distribution, program, run.model.output_paths(), auto_tp);
    if (!visualize.empty()) print_blocks(distribution, program, visualize);
  } else if (!visualize.empty()) {
    throw ConfigError(file + ": --visualize shows how a distribution splits a tensor; the config has no distribution:");
  }
  if (resolved) fmt::print("\nResolved config:\n{}\n", run.root.dump());
  return kOk;
}

// `command_line`: the program as invoked and its arguments, for the commands
// the last line shows (to resume the run a signal stopped, to evaluate what
// it saved).
int train(const std::string& file, const std::vector<std::string>& overrides, const std::string& log_path,
          const std::string& resume_dir, NonFinite non_finite, bool profile,
          const std::vector<std::string>& command_line) {
  RunConfig run = load_config(file, overrides);
  run.training.checkpoint.resolved_config = run.root.dump();
  if (!run.train_data) throw ConfigError(file + ": data.train is required to train");
  // The metrics log opens (its folder made) before anything trains: a path
  // that cannot be written fails now, not after the first epoch's work.
  std::ofstream log;
  if (!log_path.empty() && job_processes().placement().process == 0) {  // one log for the job
    std::error_code ec;
    if (const auto folder = std::filesystem::path(log_path).parent_path(); !folder.empty())
      std::filesystem::create_directories(folder, ec);
    log.open(log_path, std::ios::app);
    if (!log) throw Error("--log: cannot open '" + log_path + "' for writing" + (ec ? ": " + ec.message() : ""));
  }
  // Training keeps what it trains: without a folder in the config, a resumed
  // run saves where it resumed from, a new one into a new runs/ folder.
  CheckpointSpec& checkpoint = run.training.checkpoint;
  const bool new_run_folder = checkpoint.dir.empty() && !checkpoint.off && resume_dir.empty();
  if (checkpoint.dir.empty() && !checkpoint.off)
    checkpoint.dir = new_run_folder ? next_run_folder(file) : std::filesystem::path(resume_dir);
  Dataset train_data = load_dataset(*run.train_data);
  std::optional<Dataset> validation;
  if (run.validation_data) validation = load_dataset(*run.validation_data);
  VariableStore store;  // make_trainer builds the model into it (deferred in a job of several processes)
  std::unique_ptr<Trainer> trainer_owner = make_trainer(run, store);
  Trainer& trainer = *trainer_owner;
  if (!resume_dir.empty()) {
    // Everything is checked before the store changes: a checkpoint of another
    // model fails here, naming the variable.
    TrainingState state = trainer.load(resume_dir, non_finite);
    trainer.resume(state);
    fmt::print("Resuming from '{}': {} epoch(s) and {} batch(es) done, step {}{}\n", resume_dir, state.epoch,
               state.batch, state.step,
               state.learning_rate_scale == 1
                   ? ""
                   : fmt::format(", learning rate {:.6g} times the schedule's (reduce_lr_on_plateau)",
                                 state.learning_rate_scale));
    if (state.epoch >= run.training.epochs) {
      fmt::print("The checkpoint has finished all {} epoch(s); raise training.epochs to train on\n",
                 run.training.epochs);
      return kOk;
    }
  }
  std::int64_t samples = train_data.size();
  std::string held_out;
  if (run.training.validation_split > 0 && !validation) {
    samples = training_part(samples, run.training.validation_split);
    held_out = fmt::format(" ({} more held out for validation: validation_split {})", train_data.size() - samples,
                           run.training.validation_split);
  }
  fmt::print("Training '{}': {} parameters, {} samples{}, batch {}, {} epoch(s)\n", run.model.name(),
             store.parameter_count(), samples, held_out, run.training.batch_size, run.training.epochs);
  if (run.distribution) {
    fmt::print("Distribution: {}\n", run.distribution->distribution->str());
    std::vector<std::string> paths = run.model.output_paths();
    for (const auto& v : store.variables())
      if (!is_optimizer_state(v.path)) paths.push_back(v.path);  // optimizer state follows its parameter
    print_key_match_differences(run.distribution->distribution->layout_map(), paths);
  }
  if (checkpoint.off)
    fmt::print("Checkpoints: none (training.checkpoint: false)\n");
  else
    fmt::print("Checkpoints: '{}'{}\n", checkpoint.dir.string(),
               new_run_folder ? " (a new run folder; training.checkpoint.dir chooses another)" : "");
  ProgressBar bar(run.training.epochs, terminal_output());
  FitCallbacks callbacks;
  callbacks.on_batch = [&](std::int64_t e, std::int64_t b, std::int64_t n, const Evaluation& r) { bar.on_batch(e, b, n, r); };
  callbacks.on_epoch = [&](const EpochLog& l) {
    bar.on_epoch(l);
    // Every process adds its devices' collectives to the job's, which process 0 logs.
    const Communicator* comm = trainer.communicator();
    std::map<CollectiveAccounting::Key, CollectiveStats> collectives;
    if (comm != nullptr && !log_path.empty()) collectives = job_collectives(*comm);
    if (!log.is_open()) return;
    nlohmann::json j{{"epoch", l.epoch}, {"seconds", l.seconds}, {"loss", l.train.loss}, {"learning_rate", l.learning_rate}};
    for (const auto& [k, v] : l.train.metrics) j[k] = v;
    if (l.validation.samples > 0) {
      j["val_loss"] = l.validation.loss;
      for (const auto& [k, v] : l.validation.metrics) j["val_" + k] = v;
    }
    if (comm != nullptr) {  // totals over the job's devices, since the start
      for (const auto& [key, stats] : collectives)
        j["collectives"][std::string(name(key.first)) + " " + key.second] = {
            {"calls", stats.calls}, {"bytes", stats.bytes}, {"seconds", stats.seconds},
            {"inter_process_bytes", stats.inter_process_bytes}};
    }
    log << j.dump() << "\n" << std::flush;
  };
  std::optional<TrainingState> saved;
  callbacks.on_checkpoint = [&](const std::filesystem::path& dir, const TrainingState& s) {
    if (s.batch == 0)
      fmt::print("Saved checkpoint '{}' (epoch {}, step {})\n", dir.string(), s.epoch, s.step);
    else
      fmt::print("\nSaved checkpoint '{}' (epoch {}, batch {}, step {})\n", dir.string(), s.epoch + 1, s.batch, s.step);
    saved = s;
    if (!new_run_folder) return;
    if (std::string why = link_latest_run(dir); !why.empty()) fmt::print(stderr, "warning: {}\n", why);
  };
  // In a job of several processes a signal may reach one of them, or each at
  // a step of its own, and a save is collective: the job's answer stops all.
  InterruptCatcher interrupt;
  int caught = 0;  // the signal callbacks.interrupted last answered with
  ProcessGroup& processes = job_processes();
  const Communicator* job = processes.placement().processes > 1 ? trainer.communicator() : nullptr;
  callbacks.interrupted = [&] {
    caught = job != nullptr ? interrupt.caught_by_job(processes, job->timeout()) : interrupt.caught();
    return caught != 0;
  };
  std::map<std::string, StepRunner::OpTime> op_times;
  if (profile) trainer.enable_profiling(&op_times);
  const std::vector<EpochLog> logs = trainer.fit(train_data, validation ? &*validation : nullptr, callbacks);
  // A signal from here on is handled as usual. One after the last question
  // (during the last save) is not acted on: the run is over, and in a job the
  // other processes never heard of it.
  interrupt.release();
  if (profile) {
    double total = 0;
    for (const auto& [op, t] : op_times) total += t.seconds;
    std::vector<std::pair<std::string, StepRunner::OpTime>> rows(op_times.begin(), op_times.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
    // Milliseconds: fast ops take microseconds, which seconds would show as 0.000.
    std::size_t width = 48;  // the longest key's, at least
    for (const auto& row : rows) width = std::max(width, row.first.size());
    fmt::print("\n{:<{}} {:>12} {:>8} {:>10}\n", "op", width, "ms", "share", "calls");
    for (const auto& [op, t] : rows)
      fmt::print("{:<{}} {:>12.3f} {:>7.1f}% {:>10}\n", op, width, t.seconds * 1e3, 100 * t.seconds / total, t.calls);
  }
  if (const Communicator* comm = trainer.communicator()) print_collectives(job_collectives(*comm));
  const TrainingState now = trainer.state();
  // A signal during the last epoch's validation or save: the run is complete.
  if (caught != 0 && !(now.batch == 0 && now.epoch >= run.training.epochs)) {
    // The last line says where the run stands and how to go on.
    const std::string where = fmt::format(
        "Interrupted by {} {} (step {})", signal_name(caught),
        now.batch == 0 ? fmt::format("after epoch {}", now.epoch)
                       : fmt::format("at epoch {}, batch {}", now.epoch + 1, now.batch),
        now.step);
    if (saved && saved->step == now.step)
      fmt::print("\n{}: saved in '{}'. To go on{}: {}\n", where, checkpoint.dir.string(),
                 job != nullptr ? " (under mpirun, as this job was started)" : "",
                 resume_command(command_line, checkpoint.dir.string()));
    else
      fmt::print("\n{}; nothing was saved (training.checkpoint: false).\n", where);
    return 128 + caught;  // as a shell reports a process the signal ended
  }
  auto evaluate = [&](const std::string& dir) {
    const std::string program = command_line.empty() ? "tessera" : command_line.front();
    return fmt::format("{} eval {} --checkpoint {}", shell_word(program), shell_word(file), shell_word(dir));
  };
  if (saved)  // the last line says where the weights are and what to run on them
    fmt::print("\nWeights of epoch {} are in '{}'. Next: {}\n", saved->epoch, checkpoint.dir.string(),
               evaluate(checkpoint.dir.string()));
  else if (!resume_dir.empty() && logs.empty() && now.batch == 0)  // a callback stopped it before its first step
    fmt::print("\nNothing trained: the weights of epoch {} stay in '{}'. Next: {}\n", now.epoch, resume_dir,
               evaluate(resume_dir));
  else
    fmt::print("\nNothing was saved (training.checkpoint: false).\n");
  return kOk;
}

// What a distribution will do, without running a step: AutoTP's rules, the
// layouts, the collectives of one training step, and the cost model's
// predicted memory and step time.
int plan(const std::string& file, const std::vector<std::string>& overrides, bool recalibrate) {
  // Measured first when asked: type auto chooses with the cache too.
  const Calibration calibration = cached_calibration(recalibrate);
  RunConfig run = load_config(file, overrides);
  if (!run.distribution) throw ConfigError(file + ": plan needs a distribution: section (or --set distribution=...)");
  VariableStore store;
  auto trainer = make_trainer(run, store);
  const SpmdProgram& program = *trainer->sharded_program(run.training.batch_size);
  const AutoTpPlan* auto_tp = run.distribution->auto_tp ? &*run.distribution->auto_tp : nullptr;
  if (run.distribution->auto_choice) print_auto_choice(*run.distribution->auto_choice, run.distribution->memory_limit);
  if (auto_tp != nullptr) print_auto_tp(*auto_tp);
  print_sharding(*run.distribution->distribution, program, run.model.output_paths(), auto_tp);
  const int devices = static_cast<int>(program.mesh().size());
  const int threads = std::max(1, calibration.cores / devices);
  StepCost cost = predict_step(program, calibration, threads);
  fmt::print("\nPredicted step (batch {}, {} thread(s) per device): {:.2f} ms = compute {:.2f} ms ({:.2f} GFLOP per device) "
             "+ communication {:.2f} ms\n",
             run.training.batch_size, threads, cost.seconds() * 1e3, cost.compute_seconds * 1e3,
             static_cast<double>(cost.flops) / 1e9, cost.communication_seconds * 1e3);
  fmt::print("Calibration (cached; --recalibrate to measure again): matmul {:.1f} GFLOP/s and memory {:.1f} GB/s per "
             "thread, links {:.1f} GB/s with {:.1f} us latency, {} cores\n",
             calibration.matmul_gflops_per_thread, calibration.memory_gbps_per_thread, calibration.link_gbps,
             calibration.collective_latency_us, calibration.cores);
  return kOk;
}

// A trainer of `run` with the weights of checkpoint `dir` (checked before
// use; a sharded trainer's devices read only their slices), for eval and
// predict: it takes no training step, so its weights are fixed.
std::unique_ptr<Trainer> trainer_with_weights(RunConfig& run, VariableStore& store, const std::string& dir,
                                              NonFinite non_finite) {
  std::unique_ptr<Trainer> trainer = make_trainer(run, store, job_processes(), TrainerUse::inference);
  TrainingState state = trainer->load(dir, non_finite);
  fmt::print("Loaded '{}' (epoch {}, step {})\n", dir, state.epoch, state.step);
  return trainer;
}

int eval(const std::string& file, const std::vector<std::string>& overrides, const std::string& checkpoint,
         const std::string& split, NonFinite non_finite) {
  RunConfig run = load_config(file, overrides);
  // With training.validation_split the validation samples are the held-out end of data.train.
  const bool held_out = !run.validation_data && run.training.validation_split > 0 && run.train_data;
  auto data = split == "train" || held_out ? run.train_data : run.validation_data;
  if (!data) throw ConfigError(file + ": data." + split + " is required to evaluate on it");
  Dataset dataset = load_dataset(*data);
  if (held_out) {
    auto [train_part, validation_part] = split_validation(dataset, run.training.validation_split);
    dataset = split == "train" ? train_part : validation_part;
  }
  VariableStore store;
  std::unique_ptr<Trainer> trainer_owner = trainer_with_weights(run, store, checkpoint, non_finite);
  Trainer& trainer = *trainer_owner;
  ProgressBar bar = ProgressBar::pass("Evaluating", /*with_loss=*/true, terminal_output());
  const Evaluation result =
      trainer.evaluate(dataset, [&](std::int64_t b, std::int64_t n, const Evaluation& running) { bar.on_batch(1, b, n, running); });
  bar.finish();
  fmt::print("{} ({} samples): {}\n", split, dataset.size(), format_evaluation(result));
  std::fflush(stdout);
  return kOk;
}

// Inputs from .npy or IDX images, preprocessed as the model's training data
// was (data.train's rescale:); outputs to .npy or .csv (one row per sample).
int predict(const std::string& file, const std::vector<std::string>& overrides, const std::string& checkpoint,
            const std::string& input, const std::string& output, NonFinite non_finite) {
  RunConfig run = load_config(file, overrides);
  auto extension = [](const std::string& path) { return std::filesystem::path(path).extension().string(); };
  // data.train's rescale: when it sets one; else each format's own default
  // (IDX images 1/255, .npy as they are), said when it differs from training's.
  const bool set = run.train_data && run.train_data->has("rescale");
  const bool idx = extension(input) != ".npy" && input.find("idx") != std::string::npos;
  const double scale = set ? input_rescale(*run.train_data) : idx ? 1.0 / 255.0 : 1.0;
  if (set && scale != 1.0) fmt::print("Inputs multiplied by {}, as data.train's are (rescale:)\n", rescale_text(scale));
  if (!set && run.train_data && input_rescale(*run.train_data) != scale)
    fmt::print(stderr, "warning: data.train's inputs are multiplied by {}, these by {}: set data.train.rescale to "
               "apply the same factor to them\n", rescale_text(input_rescale(*run.train_data)), rescale_text(scale));
  Tensor inputs;
  if (extension(input) == ".npy") {
    inputs = rescaled(load_npy(input), scale);
  } else if (idx) {
    inputs = load_idx_images(input, static_cast<float>(scale));
  } else {
    throw DataError("predict: cannot read '" + input + "': expected a .npy file or IDX images (name containing 'idx')");
  }
  if (extension(output) != ".npy" && extension(output) != ".csv")
    throw DataError("predict: cannot write '" + output + "': expected a .npy or .csv file name");
  VariableStore store;
  std::unique_ptr<Trainer> trainer_owner = trainer_with_weights(run, store, checkpoint, non_finite);
  Trainer& trainer = *trainer_owner;
  ProgressBar bar = ProgressBar::pass("Predicting", /*with_loss=*/false, terminal_output());
  Tensor outputs =
      trainer.predict(inputs, [&](std::int64_t b, std::int64_t n, const Evaluation& running) { bar.on_batch(1, b, n, running); });
  bar.finish();
  if (job_processes().placement().process != 0) return kOk;  // every process has them; one writes
  if (extension(output) == ".npy") {
    save_npy(output, outputs);
  } else {
    std::ofstream csv(output + ".tmp");
    std::int64_t n = outputs.shape()[0], width = outputs.numel() / std::max<std::int64_t>(1, n);
    const float* p = outputs.data<float>();
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t c = 0; c < width; ++c)  // the shortest text that reads back as the same float
        csv << fmt::format("{}", p[r * width + c]) << (c + 1 == width ? "\n" : ",");
    csv.close();
    if (!csv) throw DataError("predict: could not write '" + output + "'");
    std::filesystem::rename(output + ".tmp", output);  // never a half-written output
  }
  fmt::print("Wrote {} predictions {} to '{}'\n", outputs.shape()[0], outputs.shape().str(), output);
  return kOk;
}

// Text after each prompt: streamed as it comes for one prompt, each
// completion in turn for several; a summary of the speeds on stderr.
int generate(const std::string& file, const std::vector<std::string>& overrides, const std::string& checkpoint,
             std::vector<std::string> prompts, const std::string& prompt_file, const GenerationOptions& options,
             bool ignore_end_of_text, NonFinite non_finite) {
  if (!prompt_file.empty()) {
    std::ifstream in(prompt_file);
    if (!in) throw DataError("generate: cannot read the prompt file '" + prompt_file + "'");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);  // one prompt per line
  }
  if (prompts.empty()) throw ConfigError("generate: no prompt: give --prompt TEXT (repeatable) or --prompt-file FILE");
  check_sampling(options);
  InferenceModel model(file, checkpoint, overrides, non_finite);
  const Tokenizer& tokenizer = model.tokenizer();
  std::vector<std::vector<std::int32_t>> tokens;
  for (const auto& p : prompts) tokens.push_back(tokenizer.encode(p));
  const bool stream = prompts.size() == 1;
  if (stream) fmt::print("{}", prompts[0]);
  std::fflush(stdout);
  GenerationOptions run_options = options;
  if (const auto end = tokenizer.end_of_text(); end && !ignore_end_of_text) run_options.stop_tokens.push_back(*end);
  const Generation g = model.generate(tokens, run_options, [&](std::size_t, std::int32_t token) {
    if (!stream) return;
    const std::int32_t one[] = {token};
    fmt::print("{}", tokenizer.decode(one));
    std::fflush(stdout);
  });
  if (stream) fmt::print("\n");
  for (std::size_t i = 0; !stream && i < prompts.size(); ++i)
    fmt::print("--- {}/{}\n{}{}\n", i + 1, prompts.size(), prompts[i], tokenizer.decode(g.tokens[i]));
  double later = 0;  // tokens after each prompt's first
  for (const auto& t : g.tokens) later += static_cast<double>(std::max<std::size_t>(t.size(), 1) - 1);
  std::fflush(stdout);
  fmt::print(stderr, "{} prompt(s), {} prompt tokens: {:.1f} tokens/s to the first new token; {:.1f} new tokens/s after it\n",
             prompts.size(), g.prompt_tokens, static_cast<double>(g.prompt_tokens) / std::max(g.first_token_seconds, 1e-9),
             later > 0 ? later / std::max(g.later_tokens_seconds, 1e-9) : 0.0);
  return kOk;
}

// Prints the devices and runs one small matmul on each backend, checked
// against a plain loop on the host.
int selfcheck(int cpu_devices) {
  set_cpu_device_count(cpu_devices);
  fmt::print("Tessera self-check\n");
  fmt::print("  CUDA backend compiled: {}\n", cuda_compiled() ? "yes" : "no");
  fmt::print("  devices:");
  for (const auto& d : available_devices()) fmt::print(" {}", d.str());
  fmt::print("\n");
  if (cuda_compiled() && cuda_device_count() == 0)
    fmt::print("  (no GPU found: the CUDA backend is built but has no device to run on)\n");

  const std::int64_t m = 64, k = 96, n = 48;
  std::vector<float> a(m * k), b(k * n), expected(m * n, 0.0f);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.1f * static_cast<float>(i));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.07f * static_cast<float>(i));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t p = 0; p < k; ++p)
      for (std::int64_t j = 0; j < n; ++j) expected[i * n + j] += a[i * k + p] * b[p * n + j];

  Tensor host_a = Tensor::from_vector(a, {m, k}), host_b = Tensor::from_vector(b, {k, n});
  bool ok = true;
  for (const auto& device : available_devices()) {
    Backend& backend = backend_for(device);
    Tensor da = Tensor::empty(host_a.shape(), DType::f32, device);
    Tensor db = Tensor::empty(host_b.shape(), DType::f32, device);
    Tensor dc = Tensor::empty({m, n}, DType::f32, device);
    Tensor host_c = Tensor::empty({m, n}, DType::f32);
    auto start = std::chrono::steady_clock::now();
    backend.copy(host_a, da);
    backend.copy(host_b, db);
    backend.matmul(da, db, nullptr, dc);
    backend.copy(dc, host_c);
    backend.synchronize();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    double max_error = 0;
    auto c = host_c.to_vector<float>();
    for (std::size_t i = 0; i < c.size(); ++i)
      max_error = std::max(max_error, static_cast<double>(std::abs(c[i] - expected[i])));
    bool pass = max_error < 1e-3;
    ok = ok && pass;
    fmt::print("  {:<8} {:<7} matmul {}x{}x{}: max |error| {:.2e}  {:.2f} ms  {}\n", device.str(),
               backend.name(), m, k, n, max_error, ms, pass ? "ok" : "FAILED");
  }
  fmt::print("{}\n", ok ? "self-check passed" : "self-check FAILED");
  return ok ? kOk : kFailed;
}

// A progress bar of a checkpoint operation, tensor by tensor.
CheckpointProgress tensor_progress(ProgressBar& bar) {
  return [&bar](std::size_t done, std::size_t total, std::uint64_t) {
    Evaluation so_far;
    so_far.samples = static_cast<std::int64_t>(done);
    bar.on_batch(1, so_far.samples, static_cast<std::int64_t>(total), so_far);
  };
}

// One safetensors file of the model's variables (no optimizer state), whole,
// from a checkpoint of either form: the file other tools load.
int export_checkpoint(const std::string& dir, const std::string& out) {
  const std::map<std::string, std::string> metadata{{"format", "pt"}, {"source", "tessera export of " + dir}};
  auto is_model = [](const std::string& name) { return !is_optimizer_state(name); };
  ProgressBar bar = ProgressBar::pass("Exporting", /*with_loss=*/false, terminal_output(), "tensors");
  export_consolidated(dir, out, metadata, is_model, 64ull << 20, tensor_progress(bar));
  bar.finish();
  SafetensorsHeader written = read_safetensors_header(out);
  fmt::print("Wrote {} tensors of '{}' to '{}'\n", written.tensors.size(), dir, out);
  return kOk;
}

// Checks a checkpoint without a config: state, index, headers, and every
// tensor read whole against its checksum. Values that are NaN or infinite
// load, so they are reported, and fail the check.
int verify(const std::string& dir) {
  ProgressBar bar = ProgressBar::pass("Verifying", /*with_loss=*/false, terminal_output(), "tensors");
  const CheckpointReport r = verify_checkpoint(dir, tensor_progress(bar));
  bar.finish();
  fmt::print("'{}': {} tensors, {} bytes, in {} files: every file reads, and {} of {} blocks match their checksums\n", dir,
             r.tensors, r.bytes, r.files, r.checksummed, r.blocks);
  if (r.checksummed < r.blocks)
    fmt::print("{} blocks carry no checksum (written by another tool, or before Tessera recorded them): read, not checked\n",
               r.blocks - r.checksummed);
  for (const std::string& line : r.non_finite) fmt::print("non-finite: {}\n", line);
  fmt::print("{}\n", r.non_finite.empty() ? "verify: ok" : "verify: FAILED (non-finite values)");
  return r.non_finite.empty() ? kOk : kFailed;
}

// N of "cpu:N" (or "N"): --devices of selfcheck and devices.
int cpu_device_count(const std::string& text) {
  const std::string digits = text.starts_with("cpu:") ? text.substr(4) : text;
  const bool number = !digits.empty() && digits.size() < 6 && std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (!number || std::stoi(digits) < 1) throw CLI::ValidationError("--devices", "expected cpu:N with N >= 1, got '" + text + "'");
  return std::stoi(digits);
}

// Parses the command line into `app`: -1 when the command is to run, else the
// exit code after CLI11's message (help and --version exit 0) and, for a
// misspelt command or an option that belongs in the config, a hint.
int parse_command_line(CLI::App& app, int argc, char** argv) {
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> commands;
    for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) commands.push_back(command->get_name());
    if (std::find(commands.begin(), commands.end(), argv[1]) == commands.end()) {
      const std::string guess = closest_command(argv[1], commands);
      std::cerr << "tessera: unknown command '" << printable(argv[1]) << "'"
                << (guess.empty() ? "" : "; did you mean '" + guess + "'?") << "\nRun tessera --help for the commands.\n";
      return kUsage;
    }
  }
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr)
      for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const std::size_t equals = arg.find('=');
        const std::string name = arg.substr(0, equals);
        if (!name.starts_with("--") || std::string(e.what()).find(name) == std::string::npos) continue;
        const std::string value = equals != std::string::npos ? arg.substr(equals + 1) : i + 1 < argc ? argv[i + 1] : "";
        std::cerr << "Hint: " << unexpected_option_hint(name, value) << "\n";
        break;
      }
    return code == 0 ? 0 : kUsage;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera: train and run neural networks declared in YAML, sharded across devices"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);
  int cpu_devices = 2;
  auto* check = app.add_subcommand("selfcheck", "Print the devices and run a small matmul on each");
  auto* list = app.add_subcommand("devices", "List the devices this process can use");
  for (auto* cmd : {check, list}) {
    // cpu:N, as bench's --devices and a config's devices: say it.
    cmd->add_option_function<std::string>("--devices", [&](const std::string& text) { cpu_devices = cpu_device_count(text); },
                                           "Logical CPU devices: cpu:N (default cpu:2)");
    cmd->add_option("--cpu-devices", cpu_devices, "N: the same as --devices cpu:N")->check(CLI::PositiveNumber)->group("");
  }

  std::string config;
  std::vector<std::string> overrides;
  bool resolved = false;
  std::string log_path;
  std::string resume_dir;
  bool profile = false;
  std::string checkpoint, split = "validation", input, output;
  auto* inspect_cmd = app.add_subcommand("inspect", "Show a config's model: layers, output shapes, variables");
  auto* train_cmd = app.add_subcommand("train", "Train the model of a config on its data");
  auto* eval_cmd = app.add_subcommand("eval", "Loss and metrics of a checkpoint on the config's data");
  auto* predict_cmd = app.add_subcommand("predict", "Model outputs of a checkpoint for inputs from a file");
  auto* plan_cmd = app.add_subcommand("plan", "Show a distribution's plan without running a step: layouts, collectives, "
                                              "predicted memory and step time");
  auto* bench_cmd = app.add_subcommand("bench", "Benchmark sharding configurations side by side");
  auto* export_cmd = app.add_subcommand("export", "Write a checkpoint's model variables, whole, into one safetensors file");
  auto* verify_cmd = app.add_subcommand("verify", "Check a checkpoint's integrity: its files, index and every tensor's checksum");
  auto* generate_cmd = app.add_subcommand("generate", "Text from a language model's checkpoint after a prompt");
  std::vector<std::string> prompts;
  std::string prompt_file;
  GenerationOptions generation;
  generate_cmd->add_option("--checkpoint", checkpoint, "Checkpoint directory, or a .safetensors file of the model's variables")
      ->required();
  generate_cmd->add_option("--prompt", prompts, "Text to continue (repeatable: several prompts as a batch)");
  generate_cmd->add_option("--prompt-file", prompt_file, "A file of prompts, one per line");
  generate_cmd->add_option("--max-new-tokens", generation.max_new_tokens, "Tokens to add to each prompt")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  generate_cmd->add_option("--temperature", generation.temperature, "0: greedy (the likeliest token); higher: more varied")
      ->capture_default_str();
  generate_cmd->add_option("--top-k", generation.top_k, "Draw among the K likeliest tokens (0: all)")->capture_default_str();
  generate_cmd->add_option("--top-p", generation.top_p, "Draw among the likeliest tokens that make up P of the probability")
      ->capture_default_str();
  generate_cmd->add_option("--seed", generation.seed, "The draws' seed: the same seed, the same text")->capture_default_str();
  bool ignore_end_of_text = false;
  generate_cmd->add_flag("--ignore-eos", ignore_end_of_text,
                         "Go on past the tokenizer's end of text (by default a text ends there)");
  std::string export_out;
  export_cmd->add_option("checkpoint", checkpoint, "Checkpoint directory (single-file or sharded)")->required();
  export_cmd->add_option("output", export_out, "The .safetensors file to write")->required();
  verify_cmd->add_option("checkpoint", checkpoint, "Checkpoint directory (single-file or sharded)")->required();
  BenchOptions bench;
  bool recalibrate = false;
  bench_cmd->add_option("--mesh", bench.meshes, "Meshes BATCHxMODEL, comma-separated")->capture_default_str();
  bench_cmd->add_option("--layout", bench.layouts, "Layouts: dp, zero, tp, fsdp, auto, config (comma-separated)")->capture_default_str();
  bench_cmd->add_option("--devices", bench.devices, "cpu:N (default: the largest mesh)");
  bench_cmd->add_option("--steps", bench.steps, "Timed training steps per configuration and round")->capture_default_str();
  bench_cmd->add_option("--rounds", bench.rounds,
                        "Rounds, each timing every configuration and one device in turn (figures: median, min-max over rounds)")
      ->capture_default_str();
  bench_cmd->add_option("--warmup", bench.warmup, "Untimed steps per configuration before the rounds")->capture_default_str();
  bench_cmd->add_option("--format", bench.format, "table, csv or json")->capture_default_str();
  bench_cmd->add_option("--chart", bench.chart, "Also write an SVG chart of samples/s to this file");
  bench_cmd->add_option("--np", bench.processes, "Also run each configuration as a job of N processes (mpirun), comma-separated")
      ->capture_default_str();
  bench_cmd->add_flag("--mpi-child", bench.mpi_child, "(internal) one process of a --np job: print JSON rows")
      ->group("");
  for (auto* cmd : {plan_cmd, bench_cmd})
    cmd->add_flag("--recalibrate", recalibrate, "Measure the cost model's device and link speeds again (else cached)");
  for (auto* cmd : {eval_cmd, predict_cmd})
    cmd->add_option("--checkpoint", checkpoint, "Checkpoint directory (written by train)")->required();
  eval_cmd->add_option("--split", split, "Which data split: validation or train")
      ->check(CLI::IsMember({"validation", "train"}));
  predict_cmd->add_option("--input", input, "Inputs: .npy, or IDX images")->required();
  predict_cmd->add_option("--output", output, "Outputs: .npy or .csv")->required();
  for (auto* cmd : {inspect_cmd, train_cmd, eval_cmd, predict_cmd, plan_cmd, bench_cmd, generate_cmd}) {
    cmd->add_option("config", config, "The run config (YAML)")->required();
    cmd->add_option("--set", overrides, "Override a config key: --set training.epochs=2 (repeatable)");
  }
  std::string device;
  bool allow_non_finite = false;
  for (auto* cmd : {train_cmd, eval_cmd, predict_cmd, generate_cmd}) {
    cmd->add_option("--device", device, "Run on this device: cpu or cuda:N (the config's device:; no distribution:)");
    cmd->add_flag("--allow-non-finite", allow_non_finite,
                  "Load a checkpoint whose weights hold NaN or infinities (refused otherwise)");
  }
  inspect_cmd->add_flag("--resolved", resolved, "Also print the config with every default filled in");
  std::string visualize;
  inspect_cmd->add_option("--visualize", visualize, "Draw which device holds which block of this variable (a path)");
  train_cmd->add_option("--log", log_path, "Append one JSON line of metrics per epoch to this file");
  train_cmd->add_option("--resume", resume_dir,
                        "Continue from this checkpoint directory (training.checkpoint.dir of an earlier run)");
  train_cmd->add_flag("--profile", profile, "Print the time spent in each op after training");
  if (const int code = parse_command_line(app, argc, argv); code >= 0) return code;
  if (!device.empty()) overrides.push_back("device=" + device);  // checked as the config's own key

  // Under mpirun every process runs this program; process 0 alone prints
  // (its progress, tables and logs stand for the job) and every process
  // reports its own fatal error, naming its rank, then ends the job.
  std::optional<MpiSession> mpi;
  ProcessPlacement where;
  try {
    if (MpiSession::launched_by_mpirun()) mpi.emplace();
    where = MpiSession::placement();
  } catch (const std::exception& e) {
    std::cerr << "tessera: error: " << printable_lines(e.what()) << "\n";
    return kFailed;
  }
  if (where.process != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return kFailed;
  try {
    if (*check) return selfcheck(cpu_devices);
    if (*list) return devices(cpu_devices);
    if (*inspect_cmd) return inspect(config, overrides, resolved, visualize);
    const NonFinite non_finite = allow_non_finite ? NonFinite::allow : NonFinite::refuse;
    if (*eval_cmd) return eval(config, overrides, checkpoint, split, non_finite);
    if (*predict_cmd) return predict(config, overrides, checkpoint, input, output, non_finite);
    if (*generate_cmd)
      return generate(config, overrides, checkpoint, prompts, prompt_file, generation, ignore_end_of_text, non_finite);
    if (*train_cmd)
      return train(config, overrides, log_path, resume_dir, non_finite, profile, {argv, argv + argc});
    if (*plan_cmd) return plan(config, overrides, recalibrate);
    if (*export_cmd) return export_checkpoint(checkpoint, export_out);
    if (*verify_cmd) return verify(checkpoint);
    if (*bench_cmd) {
      bench.config = config;
      bench.overrides = overrides;
      bench.recalibrate = recalibrate;
      return run_sharding_bench(bench);
    }
  } catch (const std::exception& e) {
    auto [label, code] = classify(e);
    const std::string rank = where.multi_process() ? "rank " + std::to_string(where.process) + ": " : "";
    // Messages may quote a damaged file: its bytes never reach the terminal raw.
    std::cerr << "tessera: " << rank << label << ": " << printable_lines(e.what()) << std::endl;
    if (where.multi_process()) MpiSession::abort_job(code);  // the other processes must not wait for this one
    return code;
  }
  return kUsage;
}
