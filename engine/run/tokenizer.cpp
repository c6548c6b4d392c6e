#include "engine/run/tokenizer.hpp"

#include "engine/core/error.hpp"

namespace tessera {

std::vector<std::int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> tokens;
  tokens.reserve(text.size());
  for (char c : text) tokens.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(c)));
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const std::int32_t> tokens) const {
  std::string text;
  text.reserve(tokens.size());
  for (std::int32_t t : tokens) {
    if (t < 0 || t > 255) throw Error("byte tokenizer: token " + std::to_string(t) + " is not a byte (0 to 255)");
    text.push_back(static_cast<char>(static_cast<unsigned char>(t)));
  }
  return text;
}

std::unique_ptr<Tokenizer> tokenizer_for(std::int64_t vocabulary) {
  if (vocabulary == 256) return std::make_unique<ByteTokenizer>();
  throw Error("no tokenizer for a vocabulary of " + std::to_string(vocabulary) +
              " tokens: Tessera has the byte tokenizer (256) only");
}

}  // namespace tessera
