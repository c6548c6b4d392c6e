// BpeTokenizer: byte-level byte-pair encoding as GPT-2 defines it, read from
// its two files (vocab.json: token string -> id; merges.txt: one "a b" pair
// per line, earlier lines merged first). A model declares it:
//   model:
//     tokenizer: {type: bpe, vocab: gpt2/vocab.json, merges: gpt2/merges.txt, end_of_text: "<|endoftext|>"}
//
// Encoding: the text is cut into pieces by GPT-2's pattern (contractions,
// words, numbers and other symbols each with one space before them, runs of
// whitespace), each piece's bytes become symbols through GPT-2's byte
// alphabet (bytes_to_unicode: printable bytes stand for themselves, the other
// 68 for code points from U+0100 on), and the pair of adjacent symbols that
// merges.txt lists first is merged until none is listed. Every text encodes
// and decodes back to its bytes. The end of text (if named) written out in a
// text is that one token, as GPT-2's users join documents with it.
//
// The pattern's classes are Unicode's: letters and numbers by the tables of
// engine/run/unicode_classes.hpp (Unicode 14), whitespace by White_Space.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/run/tokenizer.hpp"

namespace tessera {

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws Error naming the file and what is wrong in it.
  static BpeTokenizer from_files(const std::filesystem::path& vocab, const std::filesystem::path& merges);
  // From the files' contents; `vocab_label` and `merges_label` name them in errors.
  BpeTokenizer(std::string_view vocab_json, std::string_view merges_text, const std::string& vocab_label = "vocab",
               const std::string& merges_label = "merges");

  std::string name() const override { return "bpe"; }
  std::int64_t vocabulary_size() const override { return static_cast<std::int64_t>(tokens_.size()); }
  std::vector<std::int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const std::int32_t> tokens) const override;
  std::optional<std::int32_t> end_of_text() const override { return end_of_text_; }
  // Names the token that ends a text; throws Error when the vocabulary lacks it.
  void set_end_of_text(const std::string& token);

 private:
  std::vector<std::string> merge(std::string_view piece) const;

  std::unordered_map<std::string, std::int32_t> ids_;  // token string -> id
  std::vector<std::string> tokens_;                    // id -> token string
  std::unordered_map<std::string, std::int32_t> ranks_;  // "a b" -> its line among the merges
  std::optional<std::int32_t> end_of_text_;
  std::string end_of_text_bytes_;  // its text, empty without one
};

// GPT-2's pre-tokenization: `text` cut into the pieces its pattern matches,
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (views into `text`; they join back into it).
std::vector<std::string_view> gpt2_pieces(std::string_view text);

// The code point GPT-2's byte alphabet gives byte `b`.
char32_t gpt2_byte_symbol(std::uint8_t b);

}  // namespace tessera
