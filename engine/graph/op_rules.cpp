#include "engine/graph/op_rules.hpp"

#include "engine/core/error.hpp"
#include "engine/graph/fusion.hpp"

namespace tessera {

const CollectiveContext& NodeRun::spmd() const {
  if (collectives == nullptr)
    throw GraphError("op '" + std::string(name(node.kind)) +
                     "' belongs to a partitioned graph; run it with set_spmd (one executor per device)");
  return *collectives;
}

const Tensor* NodeRun::fused_bias() const {
  return epilogue != nullptr && epilogue->bias >= 0 ? &values[static_cast<std::size_t>(epilogue->bias)] : nullptr;
}

Activation NodeRun::fused_activation() const { return epilogue != nullptr ? epilogue->activation : Activation::none; }

const Tensor& NodeRun::fused_out() const {
  return epilogue != nullptr ? values[static_cast<std::size_t>(epilogue->out)] : out(0);
}

const OpRules& op_rules(OpKind kind) {
  static const OpRuleTable table = [] {
    OpRuleTable t{};
    ops::add_leaf_rules(t);
    ops::add_matmul_rules(t);
    ops::add_conv_pool_rules(t);
    ops::add_elementwise_rules(t);
    ops::add_reduce_rules(t);
    ops::add_layout_rules(t);
    ops::add_normalization_rules(t);
    ops::add_attention_rules(t);
    ops::add_embedding_rules(t);
    ops::add_update_rules(t);
    ops::add_collective_rules(t);
    return t;
  }();
  return table[static_cast<std::size_t>(kind)];
}

}  // namespace tessera
