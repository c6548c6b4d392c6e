// Factories of the built-in layers, one per YAML type, grouped by family
// (the .cpp of each family holds its layers). Arguments use Keras' names.
#pragma once

#include <memory>
#include <string>

#include "layers/layer.hpp"

namespace tessera {

class ConfigNode;

// dense.cpp: Dense(units, activation=linear, use_bias=true,
//                  kernel_initializer=glorot_uniform, bias_initializer=zeros)
std::unique_ptr<Layer> make_dense(ConfigNode args, const std::string& name);

// core.cpp: Activation(activation), Flatten(), Reshape(target_shape)
std::unique_ptr<Layer> make_activation(ConfigNode args, const std::string& name);
std::unique_ptr<Layer> make_flatten(ConfigNode args, const std::string& name);
std::unique_ptr<Layer> make_reshape(ConfigNode args, const std::string& name);

// convolution.cpp: Conv2D(filters, kernel_size, strides=1, padding=valid,
//                         activation=linear, use_bias=true, kernel_initializer,
//                         bias_initializer), channels-last
std::unique_ptr<Layer> make_conv2d(ConfigNode args, const std::string& name);

// pooling.cpp: MaxPooling2D / AveragePooling2D(pool_size=2, strides=pool_size,
//              padding=valid), GlobalAveragePooling2D()
std::unique_ptr<Layer> make_max_pooling2d(ConfigNode args, const std::string& name);
std::unique_ptr<Layer> make_average_pooling2d(ConfigNode args, const std::string& name);
std::unique_ptr<Layer> make_global_average_pooling2d(ConfigNode args, const std::string& name);

// normalization.cpp: LayerNormalization(epsilon=1e-3, center=true, scale=true)
std::unique_ptr<Layer> make_layer_normalization(ConfigNode args, const std::string& name);
// normalization.cpp: BatchNormalization(momentum=0.99, epsilon=1e-3, center, scale)
std::unique_ptr<Layer> make_batch_normalization(ConfigNode args, const std::string& name);

// embedding.cpp: Embedding(input_dim, output_dim, embeddings_initializer=uniform ±0.05)
std::unique_ptr<Layer> make_embedding(ConfigNode args, const std::string& name);

// embedding.cpp: PositionEmbedding(sequence_length, initializer=glorot_uniform):
//   learned position vectors [sequence_length, features], broadcast over the batch
//   (add them to the token embeddings with Add, as in keras_hub)
std::unique_ptr<Layer> make_position_embedding(ConfigNode args, const std::string& name);

// core.cpp: Dropout(rate, seed=0) — identity outside training; seed (>= 0)
//   varies the mask stream, which training.seed and the layer path also set
std::unique_ptr<Layer> make_dropout(ConfigNode args, const std::string& name);

// attention.cpp: MultiHeadAttention(num_heads, key_dim, use_bias=true, causal=false,
//   dropout=0) as self-attention; TransformerBlock(num_heads, key_dim, ff_dim,
//   activation=gelu, epsilon=1e-5, causal, dropout): pre-norm GPT-2 block
std::unique_ptr<Layer> make_multi_head_attention(ConfigNode args, const std::string& name);
std::unique_ptr<Layer> make_transformer_block(ConfigNode args, const std::string& name);

// merge.cpp: Add(), Concatenate(axis=-1)
std::unique_ptr<Layer> make_add(ConfigNode args, const std::string& name);
std::unique_ptr<Layer> make_concatenate(ConfigNode args, const std::string& name);

// Shared argument parsing: an int or a [h, w] pair (the optional key of
// `args`, else `default_value` for both); padding "valid" (false) or "same"
// (true), default valid.
void parse_pair(const ConfigNode& node, int& first, int& second);
void parse_pair(const ConfigNode& args, const std::string& key, int default_value, int& first, int& second);
bool parse_padding(ConfigNode& args);

}  // namespace tessera
