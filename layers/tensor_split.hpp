// How a layer's variables split for tensor parallelism. Each layer declares
// it (Layer::tensor_split); AutoTP (distribution/auto_tp.cpp) reads the
// declarations and names no layer type or variable itself, so renaming a
// variable in layers/ cannot silently turn AutoTP off.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// One variable's split: the dimension whose role (Layer variables' axis
// roles: "in", "out", "heads") is split over the mesh axis.
struct VariableSplit {
  std::string variable;  // path under the layer: "kernel", "attention/query/kernel"
  std::string role;
};

// Variables that split together or not at all; the first one decides (its
// dimension must divide over the mesh axis).
struct SplitGroup {
  std::vector<VariableSplit> splits;
  std::string when_split;  // what the plan says when it splits ("heads split: ...")
  std::string when_whole;  // and, followed by the size that does not divide, when not ("units")
};

struct TensorSplit {
  enum class Kind {
    whole,        // needs whole features: a split input is gathered first
    elementwise,  // keeps its input's split (activations, pooling, Add)
    linear,       // column-parallel on whole input features, row-parallel on split ones
    hidden,       // splits its output features whatever its input (embeddings)
    block,        // splits inside (column then row parallel) and gives whole features
  };
  Kind kind = Kind::whole;
  // linear: {the column-parallel group, the row-parallel group}; hidden: one
  // group; block: its groups, each split or not on its own.
  std::vector<SplitGroup> groups;
  std::string why_whole = "declares no tensor split";  // whole: why

  static TensorSplit needs_whole(std::string why) { return {Kind::whole, {}, std::move(why)}; }
  static TensorSplit keeps_split() { return {Kind::elementwise, {}, {}}; }
};

}  // namespace tessera
