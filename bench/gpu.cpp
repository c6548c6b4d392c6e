// bench_gpu: Tessera on one CUDA GPU against PyTorch eager on the same GPU, in
// the same run (bench/torch_gpu.py as a subprocess, first, so that the two
// never hold GPU memory at once).
//
// 1. Matmuls: N x N @ N x N through the CUDA backend, f32 (cuBLAS, no TF32)
//    and bf16 (f32 accumulation), in TFLOP/s beside torch.matmul's. The
//    peer's speed at the largest N, in f32, TF32 and bf16, is the GPU's
//    measured peak: the evidence that the peer runs at its best, and the
//    denominator of the model FLOP utilisation below.
// 2. Steps of the zoo GPT (batch 8 x 128 tokens) and of gpt_125m (batch 8 x
//    1024 tokens), training (AdamW) and inference, f32 and bf16
//    (training.precision: bf16; PyTorch: autocast), one fixed random batch
//    reused every step; inference with the weights fixed, as an embedder's
//    InferenceModel runs it (Trainer::fix_weights: bf16 copies of the weights
//    made once; PyTorch's autocast casts them in every pass). The ratio is
//    Tessera's median step over PyTorch's with
//    F.scaled_dot_product_attention (flash attention, PyTorch at its best);
//    the peer's time with Tessera's own attention math is printed beside it.
//    Target (issue 15): at most 0.8 in bf16.
// 3. Attention alone, where the steps' time goes beyond the matmuls: the
//    attention op (Backend::attention, attention_backward: FlashAttention's
//    kernels) on bf16 q, k, v [B, T, H, K], causal, as training runs it,
//    against F.scaled_dot_product_attention on the same shape: the forward
//    pass, and forward with backward, in ms and TFLOP/s (FlashAttention's
//    accounting: 4 B H T^2 K a forward pass, halved for causal; a backward
//    pass 2.5 times that). The exit status is 1 when a
//    model's parameter count differs from the peer's, 2 when a side failed. MFU = the model's FLOPs per step
//    (6N + 12 L T d per trained token, 2N + 4 L T d per inferred one, N the
//    weights outside the embedding tables) over the step time and the peak of
//    its precision.
//
//   bench_gpu                          # everything
//   bench_gpu --models gpt --modes train --precisions bf16
//   bench_gpu --python /opt/torch/.venv/bin/python3
//   bench_gpu --models gpt_125m --precisions bf16 --profile   # where Tessera's steps go
//   bench_gpu --models gpt_125m --modes train --attention-shapes 8x1024x12x64,4x2048x16x128
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/step_times.hpp"
#include "bench/torch_peer.hpp"
#include "bench/zoo_case.hpp"
#include "engine/tessera.hpp"
#include "tests/source_tree.hpp"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct GptShape {
  std::string name;  // models/<name>.yaml
  std::int64_t batch, vocab, context, d_model, layers;
};

const std::vector<GptShape>& gpt_shapes() {
  static const std::vector<GptShape> shapes{{"gpt", 8, 256, 128, 256, 4}, {"gpt_125m", 8, 256, 1024, 768, 18}};
  return shapes;
}

const GptShape& gpt_shape(const std::string& name) {
  for (const auto& s : gpt_shapes())
    if (s.name == name) return s;
  throw Error("unknown model '" + name + "' (known: gpt, gpt_125m)");
}

// Model FLOPs of one step (PaLM's accounting, appendix B): per token 6N + 12 L T d
// to train, 2N + 4 L T d to infer. N leaves out the embedding tables: per
// block 12 d^2 + 13 d weights (attention 4 d^2 + 4 d, feed-forward 8 d^2 + 5 d
// with ff = 4 d, two layer norms 4 d), then the final norm and the head.
double step_flops(const GptShape& s, bool train) {
  const double d = static_cast<double>(s.d_model);
  const double n = static_cast<double>(s.layers) * (12 * d * d + 13 * d) + 2 * d + d * static_cast<double>(s.vocab);
  const double attention = static_cast<double>(s.layers * s.context * s.d_model);
  const double tokens = static_cast<double>(s.batch * s.context);
  return tokens * (train ? 6 * n + 12 * attention : 2 * n + 4 * attention);
}

// The reference GPT's optimizer (bench_models' and torch_gpu.py's).
const std::string kAdamW =
    "{type: adamw, learning_rate: 3.0e-4, beta_1: 0.9, beta_2: 0.999, epsilon: 1.0e-8, weight_decay: 0.01}";

// ---------------------------------------------------------------------------
// Tessera side
// ---------------------------------------------------------------------------

// N x N @ N x N on cuda:0 in `dtype`, random N(0, 1) operands: the best of 5
// repeats of about 2 TFLOP each, in TFLOP/s.
double tessera_matmul_tflops(std::int64_t n, DType dtype) {
  Backend& gpu = backend_for(Device::cuda(0));
  auto operand = [&](std::uint64_t seed) {
    Tensor f32 = Tensor::empty({n, n}, DType::f32, Device::cuda(0));
    gpu.random_normal(f32, seed, 0, 0.0f, 1.0f);
    if (dtype == DType::f32) return f32;
    Tensor cast = Tensor::empty({n, n}, dtype, Device::cuda(0));
    gpu.cast(f32, cast);
    return cast;
  };
  const Tensor a = operand(1), b = operand(2);
  const Tensor out = Tensor::empty({n, n}, dtype, Device::cuda(0));
  const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const int iters = std::max(1, static_cast<int>(2e12 / flop));
  for (int i = 0; i < 3; ++i) gpu.matmul(a, b, nullptr, out);
  gpu.synchronize();
  double best = 1e300;
  for (int repeat = 0; repeat < 5; ++repeat) {
    const auto start = Clock::now();
    for (int i = 0; i < iters; ++i) gpu.matmul(a, b, nullptr, out);
    gpu.synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / iters);
  }
  return flop / best / 1e12;
}

// B x T x H x K of attention alone.
struct AttentionShape {
  std::int64_t batch = 0, tokens = 0, heads = 0, width = 0;
  static AttentionShape parse(const std::string& text) {
    std::vector<std::int64_t> dims;
    std::size_t at = 0;
    while (at <= text.size()) {
      const std::size_t end = std::min(text.find('x', at), text.size());
      const std::string part = text.substr(at, end - at);
      if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 9) break;
      dims.push_back(std::stoll(part));
      at = end + 1;
    }
    if (dims.size() != 4 || at != text.size() + 1 || std::find(dims.begin(), dims.end(), 0) != dims.end())
      throw Error("--attention-shapes: '" + text + "' is not B x T x H x K (e.g. 8x1024x12x64)");
    return AttentionShape{dims[0], dims[1], dims[2], dims[3]};
  }
  // A causal forward pass's FLOPs (its two products over the seen half).
  double forward_flops() const {
    return 2.0 * static_cast<double>(batch * heads * width) * static_cast<double>(tokens) * static_cast<double>(tokens);
  }
};

struct AttentionTimes {
  double forward_ms = 0, train_ms = 0;  // medians: the forward pass, and forward with backward
};

// The attention op as training runs it: bf16 q, k, v [B, T, H, K], out and
// the gradients f32, causal, on cuda:0.
AttentionTimes tessera_attention(const AttentionShape& s, int warmup, int steps) {
  Backend& gpu = backend_for(Device::cuda(0));
  const Device device = Device::cuda(0);
  const Shape shape{s.batch, s.tokens, s.heads, s.width};
  auto bf16_operand = [&](std::uint64_t seed) {
    Tensor f32 = Tensor::empty(shape, DType::f32, device), rounded = Tensor::empty(shape, DType::bf16, device);
    gpu.random_normal(f32, seed, 0, 0.0f, 1.0f);
    gpu.cast(f32, rounded);
    return rounded;
  };
  const Tensor q = bf16_operand(1), k = bf16_operand(2), v = bf16_operand(3), dout = bf16_operand(4);
  const Tensor out = Tensor::empty(shape, DType::f32, device), dq = Tensor::empty(shape, DType::f32, device);
  const Tensor dk = Tensor::empty(shape, DType::f32, device), dv = Tensor::empty(shape, DType::f32, device);
  const Tensor lse = Tensor::empty(Shape{s.batch, s.heads, s.tokens}, DType::f32, device);
  const AttentionArgs args{.scale = 1.0f / std::sqrt(static_cast<float>(s.width)), .causal = true, .tokens_first = true};
  auto forward = [&] {
    gpu.attention(q, k, v, out, lse, args);
    gpu.synchronize();
  };
  auto forward_backward = [&] {
    gpu.attention(q, k, v, out, lse, args);
    gpu.attention_backward(q, k, v, out, lse, dout, dq, dk, dv, args);
    gpu.synchronize();
  };
  return {bench::summarize_steps(bench::time_steps_ms(forward, warmup, steps)).median_ms,
          bench::summarize_steps(bench::time_steps_ms(forward_backward, warmup, steps)).median_ms};
}

bench::StepSummary time_tessera(bench::ZooCase& c, bool train, int warmup, int steps) {
  return bench::summarize_steps(bench::time_steps_ms([&] { c.step(train); }, warmup, steps));
}

// `steps` more steps op by op (ZooCase::profile; on the GPU's clock, CUDA
// events around each op): the heaviest `rows` op kinds. What the ops' total
// leaves of the step's time is the GPU waiting for the host between ops.
void print_profile(bench::ZooCase& c, bool train, int steps, std::size_t rows) {
  const auto ops = c.profile(train, steps);
  double total = 0;
  for (const auto& op : ops) total += op.ms_per_step;
  fmt::print("    profile, each op's GPU time (CUDA events): {:.2f} ms a step\n", total);
  for (std::size_t i = 0; i < std::min(rows, ops.size()); ++i)
    fmt::print("    {:<52} {:>9.3f} ms {:>6.1f}% {:>6.0f} calls\n", ops[i].op, ops[i].ms_per_step,
               100 * ops[i].ms_per_step / total, ops[i].calls_per_step);
}

// ---------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------

std::string fixed(double v, int digits = 1) { return v > 0 ? fmt::format("{:.{}f}", v, digits) : "-"; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpu: Tessera against PyTorch eager on one CUDA GPU"};
  std::vector<std::string> models{"gpt", "gpt_125m"}, precisions{"f32", "bf16"}, modes{"train", "infer"};
  std::vector<std::int64_t> sizes{1024, 4096, 8192};
  std::vector<std::string> attention_shapes{"8x1024x12x64"};  // gpt_125m's
  std::string python = "python3";
  int steps = 20, warmup = 5;
  bool profile = false;
  app.add_option("--models", models, "gpt, gpt_125m")->delimiter(',');
  app.add_option("--precisions", precisions, "f32, bf16")->delimiter(',');
  app.add_option("--modes", modes, "train, infer")->delimiter(',');
  app.add_option("--matmul-sizes", sizes, "N of the N x N matmuls (the largest gives the peaks)")->delimiter(',');
  app.add_option("--steps", steps, "timed steps per row")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--python", python, "the Python with PyTorch (CUDA) for the peer");
  app.add_flag("--profile", profile, "after each Tessera row, its steps op by op (each op's GPU time, by CUDA events)");
  app.add_option("--attention-shapes", attention_shapes,
                 "B x T x H x K of attention alone, causal bf16 (default gpt_125m's 8x1024x12x64; 'none': skip)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  // Each model's case trains first: inference fixes its weights for good.
  std::stable_partition(modes.begin(), modes.end(), [](const std::string& mode) { return mode == "train"; });

  try {
    for (const auto& m : models) gpt_shape(m);  // unknown names fail before anything runs
    std::erase(attention_shapes, "none");
    for (const auto& s : attention_shapes) AttentionShape::parse(s);
    if (cuda_device_count() == 0) {
      fmt::print("bench_gpu: no GPU here (CUDA backend compiled: {}): nothing to measure\n",
                 cuda_compiled() ? "yes" : "no");
      return 77;
    }
    const std::filesystem::path source_dir = tessera::test::source_dir();

    // The peer first, all of it: its process ends before Tessera takes GPU memory.
    std::sort(sizes.begin(), sizes.end());
    const auto [output, status] = bench::run_command(fmt::format(
        "cd {} && {} torch_gpu.py --matmul {} --models {} --precisions {} --modes {} --steps {} --warmup {}{} 2>&1",
        bench::shell_quote((source_dir / "bench").string()), bench::shell_quote(python), fmt::join(sizes, ","),
        fmt::join(models, ","), fmt::join(precisions, ","), fmt::join(modes, ","), steps, warmup,
        attention_shapes.empty() ? "" : " --attention-shapes " + fmt::format("{}", fmt::join(attention_shapes, ","))));
    int exit_status = status == 0 ? 0 : 2;
    std::map<std::string, double> peer_matmul;  // "n dtype" -> TFLOP/s
    std::map<std::string, json> peer_steps;     // "model precision mode attention" -> line
    std::map<std::string, json> peer_attention;  // "B x T x H x K" -> line
    std::string peer_env = "unavailable";
    for (const json& j : bench::json_lines(output)) {
      const std::string kind = j.value("kind", "");
      if (kind == "env") peer_env = "PyTorch " + j.value("torch", "?") + " on " + j.value("gpu", "?");
      if (kind == "matmul")
        peer_matmul[fmt::format("{} {}", j.value("n", 0), j.value("dtype", ""))] = j.value("tflops", 0.0);
      if (kind == "attention") peer_attention[j.value("shape", "")] = j;
      if (kind == "step")
        peer_steps[fmt::format("{} {} {} {}", j.value("model", ""), j.value("precision", ""), j.value("mode", ""),
                               j.value("attention", ""))] = j;
    }
    if (status != 0) fmt::print("peer: torch_gpu.py failed (status {}): {}\n", status, bench::last_line(output));
    // The kernels the backend was asked for (backends/cuda/cuda_backend.hpp): the proven ones unless set.
    const auto asked = [](const char* variable, const char* proven) {
      const char* value = std::getenv(variable);
      return value != nullptr ? value : proven;
    };
    fmt::print("bench_gpu: {}; Tessera's CUDA backend (cuBLAS), flash attention {} forward and {} backward, "
               "matmul epilogue {}\n",
               peer_env, asked("TESSERA_CUDA_FLASH_FORWARD", "wmma"), asked("TESSERA_CUDA_FLASH_BACKWARD", "wmma"),
               asked("TESSERA_CUDA_MATMUL_EPILOGUE", "pass"));

    // Matmuls.
    const std::int64_t largest = sizes.back();
    const double peak_bf16 = peer_matmul[fmt::format("{} bf16", largest)];
    const double peak_f32 = peer_matmul[fmt::format("{} f32", largest)];
    const double peak_tf32 = peer_matmul[fmt::format("{} tf32", largest)];
    fmt::print("measured peaks (torch.matmul {}^3): bf16 {} TFLOP/s, tf32 {}, f32 {}\n\n", largest,
               fixed(peak_bf16), fixed(peak_tf32), fixed(peak_f32));
    fmt::print("{:<10} {:>6} {:>16} {:>16} {:>7} {:>10}\n", "matmul", "dtype", "Tessera TFLOP/s",
               "PyTorch TFLOP/s", "ratio", "of peak");
    for (auto n : sizes)
      for (const std::string dtype : {"f32", "bf16"}) {
        const double ours = tessera_matmul_tflops(n, dtype == "bf16" ? DType::bf16 : DType::f32);
        const double theirs = peer_matmul[fmt::format("{} {}", n, dtype)];
        const double peak = dtype == "bf16" ? peak_bf16 : peak_f32;
        fmt::print("{:<10} {:>6} {:>16} {:>16} {:>7} {:>9}%\n", fmt::format("{}^3", n), dtype, fixed(ours),
                   fixed(theirs), theirs > 0 ? fixed(ours / theirs, 2) : "-",
                   peak > 0 ? fixed(100 * ours / peak) : "-");
      }

    // Steps.
    fmt::print("\n{:<9} {:>5} {:>6} {:>12} {:>12} {:>7} {:>15} {:>8} {:>8}\n", "model", "mode", "prec.",
               "Tessera ms", "PyTorch ms", "ratio", "PyTorch same", "MFU", "peer MFU");
    for (const auto& m : models) {
      const GptShape& shape = gpt_shape(m);
      for (const auto& p : precisions) {
        std::optional<bench::ZooCase> c;
        std::string build_error;
        try {
          c.emplace(source_dir / "models" / (m + ".yaml"), shape.batch, shape.vocab, kAdamW, Device::cuda(0),
                    p == "bf16" ? DType::bf16 : DType::f32);
        } catch (const std::exception& e) {
          build_error = e.what();
        }
        for (const auto& mode : modes) {
          const bool train = mode == "train";
          bench::StepSummary ours;
          std::string error = build_error;
          if (c) try {
              // Inference as an embedder's InferenceModel runs it: weights
              // fixed (bf16 copies made once, not cast on every pass).
              if (!train) c->trainer->fix_weights();
              ours = time_tessera(*c, train, warmup, steps);
            } catch (const std::exception& e) {
              error = e.what();
            }
          auto peer_ms = [&](const std::string& attention) {
            auto it = peer_steps.find(fmt::format("{} {} {} {}", m, p, mode, attention));
            return it == peer_steps.end() ? 0.0 : it->second.value("median_ms", 0.0);
          };
          const double theirs = peer_ms("sdpa"), theirs_same = peer_ms("explicit");
          const double peak = p == "bf16" ? peak_bf16 : peak_f32;
          const double flops = step_flops(shape, train);
          auto mfu = [&](double ms) { return ms > 0 && peak > 0 ? fixed(100 * flops / (ms * 1e-3) / (peak * 1e12)) + "%" : "-"; };
          fmt::print("{:<9} {:>5} {:>6} {:>12} {:>12} {:>7} {:>15} {:>8} {:>8}\n", m, mode, p, fixed(ours.median_ms, 2),
                     fixed(theirs, 2), ours.median_ms > 0 && theirs > 0 ? fixed(ours.median_ms / theirs, 2) : "-",
                     fixed(theirs_same, 2), mfu(ours.median_ms), mfu(theirs));
          if (!error.empty()) {
            fmt::print("  Tessera failed: {}\n", error);
            exit_status = 2;
          } else if (c && profile) {
            print_profile(*c, train, steps, 30);
          }
          const auto peer = peer_steps.find(fmt::format("{} {} {} sdpa", m, p, mode));
          if (c && peer != peer_steps.end() && peer->second.value("params", std::int64_t{0}) != c->params) {
            fmt::print("  parameter counts differ: Tessera {}, PyTorch {}\n", c->params,
                       peer->second.value("params", std::int64_t{0}));
            exit_status = std::max(exit_status, 1);
          }
        }
      }
    }
    // Attention alone.
    if (!attention_shapes.empty())
      fmt::print("\n{:<24} {:>8} {:>12} {:>12} {:>7} {:>16} {:>16}\n", "attention (causal, bf16)", "pass",
                 "Tessera ms", "PyTorch ms", "ratio", "Tessera TFLOP/s", "PyTorch TFLOP/s");
    for (const auto& text : attention_shapes) {
      const AttentionShape shape = AttentionShape::parse(text);
      AttentionTimes ours;
      try {
        ours = tessera_attention(shape, warmup, steps);
      } catch (const std::exception& e) {
        fmt::print("{:<24} Tessera failed: {}\n", text, e.what());
        exit_status = 2;
        continue;
      }
      const auto peer = peer_attention.find(text);
      const double theirs_forward = peer == peer_attention.end() ? 0.0 : peer->second.value("forward_ms", 0.0);
      const double theirs_train = peer == peer_attention.end() ? 0.0 : peer->second.value("train_ms", 0.0);
      auto row = [&](const char* pass, double ms, double peer_ms, double flops) {
        auto tflops = [&](double t) { return t > 0 ? fixed(flops / (t * 1e-3) / 1e12) : "-"; };
        fmt::print("{:<24} {:>8} {:>12} {:>12} {:>7} {:>16} {:>16}\n", text, pass, fixed(ms, 3), fixed(peer_ms, 3),
                   ms > 0 && peer_ms > 0 ? fixed(ms / peer_ms, 2) : "-", tflops(ms), tflops(peer_ms));
      };
      row("forward", ours.forward_ms, theirs_forward, shape.forward_flops());
      row("fwd+bwd", ours.train_ms, theirs_train, 3.5 * shape.forward_flops());
    }

    fmt::print("\nratio: Tessera's median step over PyTorch eager's with flash attention (target <= 0.8 in bf16);\n"
               "\"PyTorch same\": PyTorch with Tessera's attention math (matmul, softmax, matmul).\n"
               "MFU: model FLOPs (6N + 12LTd per trained token, 2N + 4LTd per inferred one) over the\n"
               "step time and the measured peak of its precision.\n");
    return exit_status;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gpu: {}\n", e.what());
    return 1;
  }
}
