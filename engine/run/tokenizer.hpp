// Tokenizer: text to the token ids a language model reads, and back.
//
// The zoo's language models read bytes (vocabulary 256: token i is byte i),
// which ByteTokenizer does; a model may declare another (`tokenizer:` of its
// config: GPT-2's byte-level BPE, engine/run/bpe_tokenizer.hpp).
// tokenizer_for() gives the one a model declares or its vocabulary calls for.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual std::int64_t vocabulary_size() const = 0;
  virtual std::vector<std::int32_t> encode(std::string_view text) const = 0;
  // The text of `tokens`; a token outside the vocabulary throws Error.
  virtual std::string decode(std::span<const std::int32_t> tokens) const = 0;
  // The token that ends a text (GPT-2's <|endoftext|>), if the tokenizer has one.
  virtual std::optional<std::int32_t> end_of_text() const { return std::nullopt; }
};

// Token i is byte i: every text encodes, and decoding a prefix of a UTF-8
// text's tokens gives its first bytes (a character may arrive in pieces).
class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  std::int64_t vocabulary_size() const override { return 256; }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> tokens) const override;
};

class ConfigNode;

// The tokenizer of a model whose output scores `vocabulary` tokens: the one
// its config declares (`declared`: {type: bytes}, or {type: bpe, vocab:
// FILE, merges: FILE, end_of_text: TOKEN} with files from the config's
// folder and end_of_text optional), else (`declared`
// null) bytes for a vocabulary of 256. Throws ConfigError at the declaration
// when it is wrong, its files cannot be read or its vocabulary is not
// `vocabulary`; Error when nothing is declared and `vocabulary` is not 256.
std::unique_ptr<Tokenizer> tokenizer_for(const ConfigNode* declared, std::int64_t vocabulary);

// Checks a `tokenizer:` declaration's form without reading its files (a run
// config does when it loads, so a training run meets a typo at once); its
// type. Throws ConfigError at the declaration.
std::string check_tokenizer(const ConfigNode& spec);

}  // namespace tessera
