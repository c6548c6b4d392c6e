// Embedding: integer ids [batch, ...] to rows of a [input_dim, output_dim] table.
#include "engine/config/config.hpp"
#include "layers/catalog.hpp"

namespace tessera {
namespace {

class Embedding final : public Layer {
 public:
  Embedding(const std::string& name, std::int64_t input_dim, std::int64_t output_dim, Initializer init)
      : Layer("Embedding", name), input_dim_(input_dim), output_dim_(output_dim), init_(init) {}

  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    ValueId table = ctx.variable("embeddings", {input_dim_, output_dim_}, init_, {"vocab", "out"});
    return ctx.graph.embedding(table, inputs[0]);
  }
  TensorSplit tensor_split() const override { return {TensorSplit::Kind::hidden, {{{{"embeddings", "out"}}, "", "the hidden size"}}}; }

 private:
  std::int64_t input_dim_, output_dim_;
  Initializer init_;
};

class PositionEmbedding final : public Layer {
 public:
  PositionEmbedding(const std::string& name, std::int64_t length, Initializer init)
      : Layer("PositionEmbedding", name), length_(length), init_(init) {}

  ValueId call(LayerContext& ctx, const std::vector<ValueId>& inputs) override {
    Shape in = ctx.graph.shape(inputs[0]);
    if (ctx.kv && ctx.kv->decode) {  // one token per sequence: the rows of their positions
      if (in.rank() != 3 || in[1] != 1) throw ShapeError("input must be [batch, 1, features] when decoding, got " + in.str());
      return ctx.graph.embedding(ctx.variable("embeddings", {length_, in[2]}, init_, {"", "out"}), ctx.kv->positions);
    }
    if (in.rank() != 3 || in[1] > length_)
      throw ShapeError("input must be [batch, sequence of at most " + std::to_string(length_) + ", features], got " +
                       in.str());
    ValueId table = ctx.variable("embeddings", {length_, in[2]}, init_, {"", "out"});
    if (in[1] < length_) table = ctx.graph.slice(table, 0, 0, in[1]);  // a shorter sequence: its first positions, as Keras
    return ctx.graph.broadcast_to(table, in);
  }
  TensorSplit tensor_split() const override { return {TensorSplit::Kind::hidden, {{{{"embeddings", "out"}}, "", "the hidden size"}}}; }

 private:
  std::int64_t length_;
  Initializer init_;
};

}  // namespace

std::unique_ptr<Layer> make_position_embedding(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "sequence_length", "initializer"});
  auto length = args["sequence_length"].as<std::int64_t>();
  if (length < 1) throw ConfigError(args["sequence_length"].location() + ": " + args["sequence_length"].path() + ": must be >= 1");
  return std::make_unique<PositionEmbedding>(name, length, initializer_arg(args, "initializer", "glorot_uniform"));
}

std::unique_ptr<Layer> make_embedding(ConfigNode args, const std::string& name) {
  args.expect_keys({"type", "name", "inputs", "input_dim", "output_dim", "embeddings_initializer"});
  auto input_dim = args["input_dim"].as<std::int64_t>();
  auto output_dim = args["output_dim"].as<std::int64_t>();
  if (input_dim < 1 || output_dim < 1)
    throw ConfigError(args.location() + ": " + args.path() + ": input_dim and output_dim must be >= 1");
  Initializer init = args.has("embeddings_initializer")
                         ? parse_initializer(args["embeddings_initializer"])
                         : Initializer{.kind = InitializerKind::random_uniform};  // Keras: uniform ±0.05
  return std::make_unique<Embedding>(name, input_dim, output_dim, init);
}

}  // namespace tessera
