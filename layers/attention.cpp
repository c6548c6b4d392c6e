// MultiHeadAttention (Keras' variables and arguments) and the pre-norm
// TransformerBlock built from it.
//
// Shapes: B batch, T sequence, D model width, H heads, K key_dim.
#include <cmath>

#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {
namespace {

// Keras' MultiHeadAttention on one sequence (self-attention): query, key and
// value projections [D, H, K] with biases [H, K], output projection [H, K, D].
struct MultiHeadArgs {
  std::int64_t num_heads = 1, key_dim = 0;
  bool use_bias = true, causal = false;
  float dropout = 0.0f;
};

ValueId self_attention(LayerContext& ctx, const std::string& scope, ValueId x, const MultiHeadArgs& a) {
  Graph& g = ctx.graph;
  Shape xs = g.shape(x);
  if (xs.rank() != 3)
    throw ShapeError("attention '" + scope + "': input must be [batch, sequence, features], got " + xs.str());
  std::int64_t b = xs[0], d = xs[2], h = a.num_heads, k = a.key_dim;
  Initializer glorot{}, zeros{.kind = InitializerKind::zeros};
  // from[B, T, D] @ W[D, H*K] -> [B, T, H, K]
  auto project = [&](const std::string& name, ValueId from) {
    ValueId w = ctx.variable(scope + name + "/kernel", {d, h, k}, glorot, {"in", "heads", ""});
    ValueId y = g.matmul(from, g.reshape(w, {d, h * k}));
    if (a.use_bias) y = g.add(y, g.reshape(ctx.variable(scope + name + "/bias", {h, k}, zeros, {"heads", ""}), {h * k}));
    return g.reshape(y, {b, g.shape(from)[1], h, k});
  };
  const std::vector<int> swap_heads{0, 2, 1, 3};  // [B, T, H, K] <-> [B, H, T, K]
  KvTrace* kv = ctx.kv;
  // A prefill's last attention layer, when only the last rows are read
  // (KvTrace::last_rows): their queries alone, over the cache once the window is in it.
  const bool last_rows_only = kv && kv->last_rows_only();
  ValueId q = project("query", last_rows_only ? rows_at(g, x, kv->last_rows) : x);
  ValueId key = project("key", x), v = project("value", x);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(k)));
  ValueId context;  // [B, T, H, K]
  if (kv) {  // this trace's keys and values written into the cache (variables) at each sequence's position
    if (!a.causal) kv->causal = false;
    q = g.transpose(q, swap_heads);
    key = g.transpose(key, swap_heads);
    v = g.transpose(v, swap_heads);
    const Initializer zeros_init{.kind = InitializerKind::zeros};
    const std::string cache = scope + "kv_cache/batch_" + std::to_string(b) + "/";
    const ValueId cached_keys = ctx.variable(cache + "keys", {b, h, kv->context, k}, zeros_init, {"", "", "", ""}, false);
    const ValueId cached_values = ctx.variable(cache + "values", {b, h, kv->context, k}, zeros_init, {"", "", "", ""}, false);
    g.cache_write(cached_keys, key, kv->positions);
    g.cache_write(cached_values, v, kv->positions);
    kv->caches.push_back(ctx.path_of(cache + "keys"));
    kv->caches.push_back(ctx.path_of(cache + "values"));
    ValueId attended;  // [B, H, T, K]
    if (kv->decode) {  // the new token over its sequence's filled cache rows only
      attended = g.cached_attention(q, cached_keys, cached_values, kv->positions, scale);
    } else if (last_rows_only) {  // the prefill starts at 0: the last row's position is its index
      attended = g.cached_attention(q, cached_keys, cached_values, kv->last_rows, scale);
    } else {
      attended = g.attention(q, key, v, {.scale = scale, .causal = a.causal});
    }
    context = g.transpose(attended, swap_heads);
  } else if (ctx.training && a.dropout > 0.0f) {  // the weights dropped out: they are in memory
    ValueId scores = g.matmul(g.transpose(q, swap_heads), g.transpose(key, swap_heads),
                              {.transpose_b = true, .alpha = scale});
    ValueId weights = a.causal ? g.causal_softmax(scores) : g.softmax(scores, -1);
    ValueId attended = g.matmul(g.dropout(weights, a.dropout, ctx.layer_seed()), g.transpose(v, swap_heads));
    context = g.transpose(attended, swap_heads);
  } else {  // one op where the device has attention kernels (Graph::attention), the head transposes its own
    context = g.attention(q, key, v, {.scale = scale, .causal = a.causal, .tokens_first = true});
  }
  ValueId wo = ctx.variable(scope + "attention_output/kernel", {h, k, d}, glorot, {"heads", "", "out"});
  ValueId out = g.matmul(g.reshape(context, {b, g.shape(context)[1], h * k}), g.reshape(wo, {h * k, d}));
  if (a.use_bias) out = g.add(out, ctx.variable(scope + "attention_output/bias", {d}, zeros, {"out"}));
  return out;
}

MultiHeadArgs parse_attention(ConfigNode& args) {
  MultiHeadArgs a;
  a.num_heads = args["num_heads"].as<std::int64_t>();
  a.key_dim = args["key_dim"].as<std::int64_t>();
  a.use_bias = args.get<bool>("use_bias", true);
  a.causal = args.get<bool>("causal", false);
  a.dropout = args.get<float>("dropout", 0.0f);
  if (a.num_heads < 1 || a.key_dim < 1)
    throw ConfigError(args.location() + ": " + args.path() + ": num_heads and key_dim must be >= 1");
  if (!(a.dropout >= 0 && a.dropout < 1))
    throw ConfigError(args["dropout"].location() + ": " + args["dropout"].path() + ": dropout must lie in [0, 1)");
  return a;
}

// The heads split together: query, key and value column-parallel, the output
// projection row-parallel (Megatron's attention).
SplitGroup attention_heads(const std::string& scope) {
  SplitGroup heads;
  for (const char* name : {"query", "key", "value"}) heads.splits.push_back({scope + name + "/kernel", "heads"});
  for (const char* name : {"query", "key", "value"}) heads.splits.push_back({scope + name + "/bias", "heads"});
  heads.splits.push_back({scope + "attention_output/kernel", "heads"});
  heads.when_split = "heads split: query/key/value column-parallel, output projection row-parallel";
  heads.when_whole = "attention replicated (falls back: heads are not padded): heads";
  return heads;
}

class MultiHeadAttention final : public Layer {
 public:
  MultiHeadAttention(const std::string& name, MultiHeadArgs args)
      : Layer("MultiHeadAttention", name), args_(args) {}
  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    return self_attention(ctx, "", inputs[0], args_);
  }
  TensorSplit tensor_split() const override { return {TensorSplit::Kind::block, {attention_heads("")}}; }
  bool attends() const override { return true; }

 private:
  MultiHeadArgs args_;
};

// Pre-norm block (GPT-2): x += attention(LN1(x)); x += ffn_out(act(ffn_in(LN2(x)))).
class TransformerBlock final : public Layer {
 public:
  TransformerBlock(const std::string& name, MultiHeadArgs attention, std::int64_t ff_dim,
                   std::string activation, float epsilon, float dropout)
      : Layer("TransformerBlock", name), attention_(attention), ff_dim_(ff_dim),
        activation_(std::move(activation)), epsilon_(epsilon), dropout_(dropout) {}

  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Graph& g = ctx.graph;
    ValueId x = inputs[0];
    std::int64_t d = g.shape(x)[g.shape(x).rank() - 1];
    Initializer ones{.kind = InitializerKind::ones}, zeros{.kind = InitializerKind::zeros}, glorot{};
    // Variables are created in separate statements: their creation order seeds
    // their initial values, and argument evaluation order is unspecified.
    auto norm = [&](const std::string& name, ValueId v) {
      ValueId gamma = ctx.variable(name + "/gamma", {d}, ones, {""});
      ValueId beta = ctx.variable(name + "/beta", {d}, zeros, {""});
      return g.layer_norm(v, gamma, beta, epsilon_)[0];
    };
    auto dense = [&](const std::string& name, ValueId v, std::int64_t in, std::int64_t out) {
      ValueId kernel = ctx.variable(name + "/kernel", {in, out}, glorot, {"in", "out"});
      ValueId bias = ctx.variable(name + "/bias", {out}, zeros, {"out"});
      return g.add(g.matmul(v, kernel), bias);
    };
    // Sites 1 and 2: the attention weights' dropout uses site 0.
    auto drop = [&](ValueId v, std::uint64_t site) {
      return ctx.training ? g.dropout(v, dropout_, ctx.layer_seed(site)) : v;
    };
    const ValueId attended = self_attention(ctx, "attention/", norm("norm_1", x), attention_);
    ctx.nested_output("attention", attended);
    if (ctx.kv && ctx.kv->last_rows_only()) x = rows_at(g, x, ctx.kv->last_rows);  // as attended's rows
    x = g.add(x, drop(attended, 1));
    ValueId hidden = apply_activation(g, dense("ffn_in", norm("norm_2", x), d, ff_dim_), activation_);
    return g.add(x, drop(dense("ffn_out", hidden, ff_dim_, d), 2));
  }
  TensorSplit tensor_split() const override {
    SplitGroup feed_forward{{{"ffn_in/kernel", "out"}, {"ffn_in/bias", "out"}, {"ffn_out/kernel", "in"}},
                            "feed-forward column- then row-parallel", "feed-forward replicated: ff_dim"};
    return {TensorSplit::Kind::block, {attention_heads("attention/"), feed_forward}};
  }
  std::vector<std::string> nested_layers() const override { return {"attention"}; }
  bool attends() const override { return true; }

 private:
  MultiHeadArgs attention_;
  std::int64_t ff_dim_;
  std::string activation_;
  float epsilon_, dropout_;
};

}  // namespace

std::unique_ptr<Layer> make_multi_head_attention(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "num_heads", "key_dim", "use_bias", "causal", "dropout"});
  return std::make_unique<MultiHeadAttention>(name, parse_attention(args));
}

std::unique_ptr<Layer> make_transformer_block(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "num_heads", "key_dim", "use_bias", "causal", "dropout",
                    "ff_dim", "activation", "epsilon"});
  MultiHeadArgs attention = parse_attention(args);
  auto ff_dim = args["ff_dim"].as<std::int64_t>();
  if (ff_dim < 1) args["ff_dim"].fail("ff_dim must be >= 1");
  auto activation = args.get<std::string>("activation", "gelu");
  check_activation(args["activation"], activation);
  return std::make_unique<TransformerBlock>(name, attention, ff_dim, activation,
                                            args.get<float>("epsilon", 1e-5f), attention.dropout);
}

}  // namespace tessera
