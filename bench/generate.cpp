// bench_generate: text generation in the style of llama-bench, Tessera
// against PyTorch running the same weights with its own KV cache
// (bench/torch_generate.py), both in the same run.
//
// Per row (batch x threads): B prompts of P tokens (consecutive slices of a
// text, the KJV by default), then N new tokens each, greedy. Figures:
//   pp  prompt processing: B*P tokens over the time to the first new token
//   tg  token generation: the time per later step (one new token per prompt)
// the best of --repeats runs of each side (Tessera's runs, then PyTorch's).
// Ratios are Tessera's time over PyTorch's: targets (issue 16) tg <= 0.5,
// pp <= 0.7, met only when both sides' greedy tokens agree (else the row is
// a failure) and the peer's sgemm reaches 60% of the FMA peak. The last
// column counts Tessera's allocations per generated token (target 0).
//
//   bench_generate --weights runs/kjv_gpt/1                 # a checkpoint of configs/kjv_gpt.yaml
//   bench_generate --weights gpt.safetensors --batches 1 --threads 1,2
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench/fma_peak.hpp"
#include "bench/machine_info.hpp"
#include "bench/torch_peer.hpp"
#include "engine/tessera.hpp"
#include "tests/source_tree.hpp"

namespace {

using namespace tessera;
using nlohmann::json;

struct Side {
  double prefill_ms = 0, decode_ms = 0;  // best of the repeats
  std::vector<std::vector<std::int32_t>> tokens;
  double allocations_per_token = -1;
  bool ran = false;
};

double best(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }

// Tessera: `repeats` greedy generations; allocations per token from two more runs of different lengths.
Side run_tessera(InferenceModel& model, const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t new_tokens,
                 int repeats) {
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = std::min<std::int64_t>(4, new_tokens);
  model.generate(prompts, greedy);  // warm-up: traces and plans the programs
  greedy.max_new_tokens = new_tokens;
  Side s;
  std::vector<double> prefill, decode;
  for (int r = 0; r < repeats; ++r) {
    Generation g = model.generate(prompts, greedy);
    prefill.push_back(g.first_token_seconds * 1e3);
    decode.push_back(g.later_tokens_seconds * 1e3 / static_cast<double>(std::max<std::int64_t>(1, new_tokens - 1)));
    s.tokens = g.tokens;
  }
  s.prefill_ms = best(prefill);
  s.decode_ms = best(decode);
  Allocator& allocator = allocator_for(Device::cpu(0));
  auto allocations = [&](std::int64_t n) {
    greedy.max_new_tokens = n;
    const std::int64_t before = allocator.stats().allocations;
    model.generate(prompts, greedy);
    return allocator.stats().allocations - before;
  };
  const std::int64_t short_run = allocations(2), long_run = allocations(2 + new_tokens);
  s.allocations_per_token = static_cast<double>(long_run - short_run) /
                            static_cast<double>(new_tokens * static_cast<std::int64_t>(prompts.size()));
  s.ran = true;
  return s;
}

// PyTorch: one subprocess per batch, a JSON line per thread count.
std::map<int, Side> run_peer(const bench::TorchPeer& peer, const std::filesystem::path& weights,
                             const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t new_tokens,
                             const std::vector<int>& threads, int repeats, const std::filesystem::path& work) {
  std::map<int, Side> sides;
  if (!peer.available) return sides;
  const auto prompts_file = work / ("prompts_" + std::to_string(prompts.size()) + ".json");
  std::ofstream(prompts_file) << json(prompts).dump();
  std::string thread_list;
  for (int t : threads) thread_list += (thread_list.empty() ? "" : ",") + std::to_string(t);
  const auto [output, status] = bench::run_command(
      peer.command("torch_generate.py") + " --weights " + bench::shell_quote(weights.string()) + " --prompts " +
      bench::shell_quote(prompts_file.string()) + " --new-tokens " + std::to_string(new_tokens) + " --threads " +
      thread_list + " --repeats " + std::to_string(repeats));
  if (status != 0) {
    fmt::print(stderr, "bench_generate: the peer failed (status {}): {}\n", status, bench::last_line(output));
    return sides;
  }
  for (const json& line : bench::json_lines(output)) {
    Side s;
    s.prefill_ms = best(line["prefill_ms"].get<std::vector<double>>());
    s.decode_ms = best(line["decode_ms_per_token"].get<std::vector<double>>());
    s.tokens = line["tokens"].get<std::vector<std::vector<std::int32_t>>>();
    s.ran = true;
    sides[line["threads"].get<int>()] = s;
  }
  return sides;
}

// The model's variables in one safetensors file, for the peer.
std::filesystem::path weights_file(const std::filesystem::path& weights, const std::filesystem::path& work) {
  if (!std::filesystem::is_directory(weights)) return weights;
  if (!std::filesystem::exists(weights / kShardIndexFile)) return weights / "model.safetensors";
  const auto out = work / "model.safetensors";
  export_consolidated(weights, out, {}, [](const std::string& t) { return t.rfind("optimizer/", 0) != 0; });
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Text generation, llama-bench style: Tessera against PyTorch with a KV cache, same weights"};
  std::string config = tessera::test::source_path("configs/kjv_gpt.yaml"), weights, text;
  std::vector<int> batches{1, 8}, threads{1, 2};
  std::int64_t prompt_tokens = 64, new_tokens = 32;
  int repeats = 3;
  std::string python = "/usr/bin/python3";
  app.add_option("--config", config, "The run config of the model")->capture_default_str();
  app.add_option("--weights", weights, "A checkpoint directory of that config's model, or a .safetensors file")
      ->required();
  app.add_option("--text", text, "Where the prompts come from (default: data/kjv.txt, else README.md)");
  app.add_option("--batches", batches, "Prompts per row, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--threads", threads, "Thread counts, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens, "Tokens per prompt")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--new-tokens", new_tokens, "New tokens per prompt")->capture_default_str()->check(CLI::Range(2, 100000));
  app.add_option("--repeats", repeats, "Timed runs per side; the best is kept")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--python", python, "The python3 that has torch")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::filesystem::path source(tessera::test::source_dir());
  if (text.empty()) text = std::filesystem::exists(source / "data/kjv.txt") ? source / "data/kjv.txt" : source / "README.md";
  std::ifstream in(text, std::ios::binary);
  const std::string corpus((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  if (static_cast<std::int64_t>(corpus.size()) < 1000 + max_batch * 997 + prompt_tokens) {
    fmt::print(stderr, "bench_generate: '{}' is too short for {} prompts of {} tokens\n", text, max_batch, prompt_tokens);
    return 2;
  }
  try {
    const auto work = std::filesystem::temp_directory_path() / ("bench_generate_" + std::to_string(getpid()));
    std::filesystem::create_directories(work);
    InferenceModel model(config, weights);
    if (prompt_tokens + new_tokens - 1 > model.context_length())
      throw ConfigError("--prompt-tokens " + std::to_string(prompt_tokens) + " + --new-tokens " + std::to_string(new_tokens) +
                        " pass the model's context of " + std::to_string(model.context_length()) +
                        " (the peer keeps no sliding window)");
    const auto peer_weights = weights_file(weights, work);
    bench::TorchPeer peer = bench::TorchPeer::find(python, source / "bench", threads);

    std::map<int, double> peak;
    const bench::Isa isa = bench::detect_isa();
    const std::int64_t iters = bench::calibrate_probe(isa, 0.3);
    for (int t : threads) peak[t] = bench::measure_peak(isa, t, iters, 5).gflops;
    fmt::print("Text generation: Tessera vs PyTorch with a KV cache, greedy, same weights ({})\n", weights);
    fmt::print("  CPU: {}; prompts of {} tokens from '{}', {} new tokens each; best of {} runs per side\n",
               bench::cpu_model(), prompt_tokens, text, new_tokens, repeats);
    fmt::print("  peer: {}\n", peer.available ? peer.describe() : "unavailable: " + peer.why);
    for (int t : threads) {
      const double sgemm = peer.sgemm_gflops.contains(t) ? peer.sgemm_gflops.at(t) : 0.0;
      fmt::print("  {} thread(s): FP32 FMA peak {:.1f} GFLOP/s; PyTorch's sgemm {:.1f} GFLOP/s = {:.0f}% of it{}\n", t,
                 peak[t], sgemm, 100 * sgemm / peak[t],
                 peer.available && sgemm < bench::kPeerGemmFloor * peak[t] ? " (under 60%: a broken peer, no row is met)" : "");
    }
    fmt::print("\n  batch threads | pp tok/s Tessera  PyTorch  ratio  <=0.7 | tg ms/token Tessera  PyTorch  ratio  <=0.5 "
               "| tokens   | allocs/token\n");
    int failures = 0, met = 0, rows = 0;
    for (int b : batches) {
      std::vector<std::vector<std::int32_t>> prompts;
      for (int i = 0; i < b; ++i)
        prompts.push_back(model.tokenizer().encode(std::string_view(corpus).substr(1000 + static_cast<std::size_t>(i) * 997,
                                                                                   static_cast<std::size_t>(prompt_tokens))));
      const auto peer_sides = run_peer(peer, peer_weights, prompts, new_tokens, threads, repeats, work);
      for (int t : threads) {
        set_cpu_device_count(1, t);
        const Side mine = run_tessera(model, prompts, new_tokens, repeats);
        const Side* theirs = peer_sides.contains(t) ? &peer_sides.at(t) : nullptr;
        const bool agree = theirs && theirs->tokens == mine.tokens;
        const bool peer_ok = peer.sgemm_gflops.contains(t) && peer.sgemm_gflops.at(t) >= bench::kPeerGemmFloor * peak[t];
        const double pp_tokens = static_cast<double>(b * prompt_tokens);
        const double pp_ratio = theirs ? mine.prefill_ms / theirs->prefill_ms : 0;
        const double tg_ratio = theirs ? mine.decode_ms / theirs->decode_ms : 0;
        auto mark = [&](double ratio, double target) {
          if (!theirs) return "  -";
          if (!agree) return "  ✗";
          if (!peer_ok) return "peer✗";
          return ratio <= target ? "  ✓" : "  ✗";
        };
        ++rows;
        if (theirs && !agree) ++failures;
        if (agree && peer_ok && pp_ratio <= 0.7 && tg_ratio <= 0.5) ++met;
        fmt::print("  {:>5} {:>7} | {:>16.0f} {:>8.0f} {:>6.2f} {:>6} | {:>19.2f} {:>8.2f} {:>6.2f} {:>6} | {:<8} | {:.1f}\n", b,
                   t, pp_tokens / (mine.prefill_ms / 1e3), theirs ? pp_tokens / (theirs->prefill_ms / 1e3) : 0.0, pp_ratio,
                   mark(pp_ratio, 0.7), mine.decode_ms, theirs ? theirs->decode_ms : 0.0, tg_ratio, mark(tg_ratio, 0.5),
                   !theirs ? "no peer" : agree ? "agree" : "DIFFER", mine.allocations_per_token);
      }
    }
    fmt::print("\n  pp: the prompts' tokens over the time to the first new token; tg: the time of each later step.\n"
               "  ratio: Tessera's time over PyTorch's. Tessera pads the prompts to a power of two (at most the\n"
               "  context, {} tokens). A row whose greedy tokens differ from the peer's is a failure.\n",
               model.context_length());
    fmt::print("  {} of {} rows meet both targets; {} row(s) with tokens that differ.\n", met, rows, failures);
    std::filesystem::remove_all(work);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_generate: {}\n", e.what());
    return 1;
  }
}
