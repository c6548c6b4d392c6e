#include "engine/run/tokenizer.hpp"

#include "engine/config/config.hpp"
#include "engine/core/error.hpp"
#include "engine/run/bpe_tokenizer.hpp"

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

std::string check_tokenizer(const ConfigNode& spec) {
  if (!spec.is_map()) spec.fail("expected a tokenizer like {type: bpe, vocab: vocab.json, merges: merges.txt}");
  const auto type = spec["type"].as<std::string>();
  if (type == "bytes") {
    spec.expect_keys({"type"});
  } else if (type == "bpe") {
    spec.expect_keys({"type", "vocab", "merges", "end_of_text"});
    for (const char* file : {"vocab", "merges"}) spec[file].as<std::string>();  // present, and text
  } else {
    spec["type"].fail_unknown("tokenizer type", type, {"bytes", "bpe"});
  }
  return type;
}

std::unique_ptr<Tokenizer> tokenizer_for(const ConfigNode* declared, std::int64_t vocabulary) {
  if (declared == nullptr) {
    if (vocabulary == 256) return std::make_unique<ByteTokenizer>();
    throw Error("no tokenizer for a vocabulary of " + std::to_string(vocabulary) +
                " tokens: declare one in the model's config (tokenizer: {type: bpe, vocab: vocab.json, merges: "
                "merges.txt}); bytes are taken for 256 only");
  }
  const ConfigNode& spec = *declared;
  const std::string type = check_tokenizer(spec);
  std::unique_ptr<Tokenizer> tokenizer;
  if (type == "bytes") {
    tokenizer = std::make_unique<ByteTokenizer>();
  } else {
    std::unique_ptr<BpeTokenizer> bpe;
    try {
      bpe = std::make_unique<BpeTokenizer>(BpeTokenizer::from_files(spec.resolve_path(spec["vocab"].as<std::string>()),
                                                                    spec.resolve_path(spec["merges"].as<std::string>())));
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      spec.fail(e.what());
    }
    if (spec.has("end_of_text")) {
      try {
        bpe->set_end_of_text(spec["end_of_text"].as<std::string>());
      } catch (const ConfigError&) {
        throw;
      } catch (const Error& e) {
        spec["end_of_text"].fail(e.what());
      }
    }
    tokenizer = std::move(bpe);
  }
  if (tokenizer->vocabulary_size() != vocabulary)
    spec.fail("the " + type + " tokenizer has " + std::to_string(tokenizer->vocabulary_size()) +
              " tokens but the model scores " + std::to_string(vocabulary));
  return tokenizer;
}

}  // namespace tessera
