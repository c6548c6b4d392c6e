// Tokenizers (engine/run/tokenizer.hpp, bpe_tokenizer.hpp): GPT-2's byte
// alphabet and pre-tokenization, byte-pair merges in their rank order on a
// small vocabulary written here, round trips of any bytes, the errors of bad
// files, and a model that declares its tokenizer in its config and generates
// with it.
#include <doctest/doctest.h>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/safetensors.hpp"
#include "engine/config/config.hpp"
#include "engine/run/bpe_tokenizer.hpp"
#include "engine/run/inference_model.hpp"
#include "engine/run/run_config.hpp"
#include "tests/temp_dir.hpp"

using namespace tessera;

namespace {

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    s.push_back(static_cast<char>(0xc0 | (c >> 6)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    s.push_back(static_cast<char>(0xe0 | (c >> 12)));
    s.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    s.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
  return s;
}

std::string byte_token(char byte) { return utf8(gpt2_byte_symbol(static_cast<std::uint8_t>(byte))); }

// A byte-level vocabulary: byte b is token b, then the merges' results from 256 on.
// "e l" comes last: in "ell" the later pair "l l" merges first, by its rank.
const std::vector<std::string> kMerges = {"h e", "l l", "he ll", "hell o", byte_token(' ') + " w", "o r",
                                          byte_token(' ') + "w or", "e l"};
constexpr std::int32_t kVocabulary = 256 + 8;

std::string vocab_json(int skip_byte = -1) {
  nlohmann::json vocab = nlohmann::json::object();
  std::int32_t id = 0;
  for (int b = 0; b < 256; ++b)
    if (b != skip_byte) vocab[byte_token(static_cast<char>(b))] = id++;
  for (const std::string& m : kMerges) {
    std::string merged = m;
    merged.erase(merged.find(' '), 1);
    vocab[merged] = id++;
  }
  return vocab.dump();
}

std::string merges_text() {
  std::string text = "#version: 0.2\n";
  for (const std::string& m : kMerges) text += m + "\n";
  return text;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pieces(text)) out.emplace_back(p);
  return out;
}

}  // namespace

TEST_CASE("gpt-2's byte alphabet: printable bytes stand for themselves, the others for U+0100 on") {
  std::set<char32_t> symbols;
  for (int b = 0; b < 256; ++b) symbols.insert(gpt2_byte_symbol(static_cast<std::uint8_t>(b)));
  CHECK(symbols.size() == 256);
  CHECK(gpt2_byte_symbol('A') == U'A');
  CHECK(gpt2_byte_symbol(' ') == U'\u0120');  // GPT-2's "Ġ"
  CHECK(gpt2_byte_symbol('\n') == U'\u010a');  // "Ċ"
  CHECK(gpt2_byte_symbol(0xad) == U'\u0143');  // the soft hyphen, the last unprintable one
  CHECK(gpt2_byte_symbol(0xe9) == U'\u00e9');
}

TEST_CASE("gpt-2's pre-tokenization: contractions, words, numbers and symbols with one space before, whitespace runs") {
  CHECK(pieces("Hello, world! It's 2026.\n\n  ok") ==
        std::vector<std::string>{"Hello", ",", " world", "!", " It", "'s", " 2026", ".", "\n\n ", " ok"});
  CHECK(pieces("a  b") == std::vector<std::string>{"a", " ", " b"});
  CHECK(pieces("x   ") == std::vector<std::string>{"x", "   "});
  CHECK(pieces("a\nb") == std::vector<std::string>{"a", "\n", "b"});
  CHECK(pieces("don't I'LL we've") == std::vector<std::string>{"don", "'t", " I", "'", "LL", " we", "'ve"});
  CHECK(pieces("caf\xc3\xa9 \xc3\xbc" "ber \xe5\x8c\x97\xe4\xba\xac \xc2\xbd!") ==
        std::vector<std::string>{"caf\xc3\xa9", " \xc3\xbc" "ber", " \xe5\x8c\x97\xe4\xba\xac", " \xc2\xbd", "!"});
  CHECK(pieces("hi \xf0\x9f\x91\x8b!") == std::vector<std::string>{"hi", " \xf0\x9f\x91\x8b!"});  // an emoji is a symbol
  CHECK(pieces("").empty());
  // Bytes that are not UTF-8 (a stray continuation, an overlong space) are symbols, not letters or spaces.
  CHECK(pieces("a\xa0" "b \xc0\xa0" "x") == std::vector<std::string>{"a", "\xa0", "b", " \xc0\xa0", "x"});
  const std::string text = "  Mixed: tabs\tand \xff bytes\r\n 42x";
  std::string joined;
  for (std::string_view p : gpt2_pieces(text)) joined += p;
  CHECK(joined == text);
}

TEST_CASE("bpe merges pairs in the order merges.txt lists them, and decodes any bytes back") {
  const BpeTokenizer bpe(vocab_json(), merges_text());
  CHECK(bpe.name() == "bpe");
  CHECK(bpe.vocabulary_size() == kVocabulary);
  // "hello" merges whole (ranks 0 to 3); " world" takes " w", "or", " wor", then l and d alone.
  CHECK(bpe.encode("hello world") == std::vector<std::int32_t>{259, 262, 'l', 'd'});
  CHECK(bpe.encode("hhe") == std::vector<std::int32_t>{'h', 256});
  CHECK(bpe.encode("ell") == std::vector<std::int32_t>{'e', 257});     // by rank, not from the left: not "el" "l"
  CHECK(bpe.encode("hel") == std::vector<std::int32_t>{256, 'l'});     // "h e" before "e l"
  CHECK(bpe.encode("hehe") == std::vector<std::int32_t>{256, 256});    // every occurrence
  CHECK(bpe.encode("lllll") == std::vector<std::int32_t>{257, 257, 'l'});  // left to right, never overlapping
  // A long piece (one run of letters) merges in n log n: 200k letters at once.
  const std::string letters(200000, 'l');
  CHECK(bpe.encode(letters).size() == 100000);
  CHECK(bpe.encode("").empty());
  for (const std::string text : {"hello world", "Caf\xc3\xa9 \xf0\x9f\x91\x8b\n\n  tabs\t", "\xff\xfe broken \xc3", "12'll"})
    CHECK(bpe.decode(bpe.encode(text)) == text);
  const std::vector<std::int32_t> bad{259, kVocabulary};
  CHECK_THROWS_WITH_AS(bpe.decode(bad), doctest::Contains("token 264 is outside the vocabulary (0 to 263)"), Error);
}

TEST_CASE("bpe refuses files it cannot use, naming them and the line") {
  CHECK_THROWS_WITH_AS(BpeTokenizer(vocab_json('x'), merges_text(), "'v.json'"),
                       doctest::Contains("'v.json' has no token for byte 120"), Error);
  CHECK_THROWS_WITH_AS(BpeTokenizer("{not json", merges_text(), "'v.json'"), doctest::Contains("'v.json' is not JSON"), Error);
  CHECK_THROWS_WITH_AS(BpeTokenizer("[1, 2]", merges_text(), "'v.json'"), doctest::Contains("must be a JSON object"), Error);
  CHECK_THROWS_WITH_AS(BpeTokenizer(R"({"a": 0, "b": 0})", ""), doctest::Contains("id 0 is given to"), Error);
  CHECK_THROWS_WITH_AS(BpeTokenizer(R"({"": 0, "b": 0})", ""), doctest::Contains("id 0 is given to"), Error);
  CHECK_THROWS_WITH_AS(BpeTokenizer(vocab_json(), "#version: 0.2\nh e\nlonely\n", "v", "'m.txt'"),
                       doctest::Contains("'m.txt':3: expected two symbols"), Error);
  CHECK_THROWS_WITH_AS(BpeTokenizer(vocab_json(), "x y\n", "'v.json'", "'m.txt'"),
                       doctest::Contains("'m.txt':1: the merge of 'x y' is not a token of 'v.json'"), Error);
  CHECK_THROWS_WITH_AS(BpeTokenizer::from_files("/nonexistent/vocab.json", "/nonexistent/merges.txt"),
                       doctest::Contains("/nonexistent/vocab.json"), Error);
}

TEST_CASE("a model's config declares its tokenizer, and a wrong one is an error at its line") {
  test::TempDir dir;
  std::ofstream(dir / "vocab.json") << vocab_json();
  std::ofstream(dir / "merges.txt") << merges_text();
  std::ofstream(dir / "spec.yaml") << "tokenizer: {type: bpe, vocab: vocab.json, merges: merges.txt}\n"
                                      "bytes: {type: bytes}\n"
                                      "missing: {type: bpe, vocab: none.json, merges: merges.txt}\n"
                                      "unknown: {type: wordpiece}\n"
                                      "ended: {type: bpe, vocab: vocab.json, merges: merges.txt, end_of_text: ll}\n"
                                      "unended: {type: bpe, vocab: vocab.json, merges: merges.txt, end_of_text: \"<|endoftext|>\"}\n";
  const ConfigNode spec = ConfigNode::load_file(dir / "spec.yaml");
  const ConfigNode bpe = spec["tokenizer"], bytes = spec["bytes"], missing = spec["missing"], unknown = spec["unknown"];
  const ConfigNode ended = spec["ended"], unended = spec["unended"];
  CHECK_FALSE(tokenizer_for(&bpe, kVocabulary)->end_of_text().has_value());
  CHECK(tokenizer_for(&ended, kVocabulary)->end_of_text() == 257);  // "ll" ends a text here
  // Written out in a text, the end of text is its one token, though "hello" would merge whole around it.
  const auto with_end = tokenizer_for(&ended, kVocabulary);
  CHECK(with_end->encode("hello") == std::vector<std::int32_t>{256, 257, 'o'});
  CHECK(with_end->encode("ll") == std::vector<std::int32_t>{257});
  CHECK(with_end->decode(with_end->encode("hello ll wall")) == "hello ll wall");
  CHECK(tokenizer_for(&bpe, kVocabulary)->encode("hello") == std::vector<std::int32_t>{259});
  CHECK_THROWS_WITH_AS(tokenizer_for(&unended, kVocabulary),
                       doctest::Contains("spec.yaml:6:74: unended.end_of_text: bpe tokenizer: the end of text '<|endoftext|>' is not a token"),
                       ConfigError);
  CHECK(tokenizer_for(&bpe, kVocabulary)->name() == "bpe");  // its files from the config's folder
  CHECK(tokenizer_for(&bytes, 256)->name() == "bytes");
  CHECK(tokenizer_for(nullptr, 256)->name() == "bytes");
  CHECK_THROWS_WITH_AS(tokenizer_for(&bpe, 256), doctest::Contains("spec.yaml:1:12: tokenizer: the bpe tokenizer has 264 tokens but the model scores 256"), ConfigError);
  CHECK_THROWS_WITH_AS(tokenizer_for(&missing, kVocabulary), doctest::Contains("none.json"), ConfigError);
  CHECK_THROWS_WITH_AS(tokenizer_for(&unknown, kVocabulary), doctest::Contains("unknown tokenizer type 'wordpiece'"), ConfigError);
  CHECK_THROWS_WITH_AS(tokenizer_for(nullptr, 50257), doctest::Contains("declare one in the model's config"), Error);
}

TEST_CASE("a run config checks its model's tokenizer declaration when it loads, before any file is read") {
  test::TempDir dir;
  const auto load = [&](const std::string& tokenizer) {
    std::ofstream(dir / "run.yaml") << "model:\n  tokenizer: " << tokenizer << R"(
  inputs: [{name: tokens, shape: [4], dtype: i32}]
  layers: [{type: Embedding, input_dim: 256, output_dim: 4}]
)";
    return load_run_config(dir / "run.yaml");
  };
  CHECK_NOTHROW(load("{type: bpe, vocab: not_read_yet.json, merges: not_read_yet.txt}"));
  CHECK_THROWS_WITH_AS(load("{type: bpe, vocab: v.json}"), doctest::Contains("run.yaml:2:14: model.tokenizer: missing required key 'merges'"), ConfigError);
  CHECK_THROWS_WITH_AS(load("{type: bpee}"), doctest::Contains("unknown tokenizer type 'bpee' (did you mean 'bpe'?)"), ConfigError);
  CHECK_THROWS_WITH_AS(load("{type: bytes, vocab: v.json}"), doctest::Contains("unknown key 'vocab'"), ConfigError);
  CHECK_THROWS_WITH_AS(load("bpe"), doctest::Contains("run.yaml:2:14: model.tokenizer: expected a tokenizer like"), ConfigError);
}

TEST_CASE("a language model of a bpe vocabulary declared in its config generates text through it") {
  test::TempDir dir;
  std::ofstream(dir / "vocab.json") << vocab_json();
  std::ofstream(dir / "merges.txt") << merges_text();
  std::ofstream(dir / "gpt.yaml") << R"(model:
  name: bpe_gpt
  tokenizer: {type: bpe, vocab: vocab.json, merges: merges.txt}
  inputs: [{name: tokens, shape: [16], dtype: i32}]
  layers:
    - {type: Embedding, name: token_embedding, input_dim: 264, output_dim: 32, inputs: [tokens]}
    - {type: PositionEmbedding, name: position_embedding, sequence_length: 16, inputs: [token_embedding]}
    - {type: Add, name: embeddings, inputs: [token_embedding, position_embedding]}
    - {type: TransformerBlock, name: block_0, num_heads: 2, key_dim: 16, ff_dim: 64, causal: true, inputs: [embeddings]}
    - {type: LayerNormalization, name: final_norm, inputs: [block_0]}
    - {type: Dense, name: head, units: 264, use_bias: false, inputs: [final_norm]}
)";
  RunConfig run = load_run_config(dir / "gpt.yaml");
  VariableStore store;
  run.model.build(store, 3);
  NamedTensors tensors;
  for (const auto& v : store.variables()) tensors.emplace_back(v.path, v.value);
  save_safetensors(dir / "gpt.safetensors", tensors, {});

  InferenceModel model(dir / "gpt.yaml", dir / "gpt.safetensors");
  CHECK(model.tokenizer().name() == "bpe");
  const std::vector<std::int32_t> prompt = model.tokenizer().encode("hello world");
  CHECK(prompt == std::vector<std::int32_t>{259, 262, 'l', 'd'});
  GenerationOptions greedy;
  greedy.temperature = 0;
  greedy.max_new_tokens = 6;
  const Generation g = model.generate({prompt}, greedy);
  REQUIRE(g.tokens.size() == 1);
  CHECK(g.tokens[0].size() == 6);
  for (std::int32_t t : g.tokens[0]) CHECK((t >= 0 && t < kVocabulary));
  CHECK(model.tokenizer().encode(model.tokenizer().decode(prompt)) == prompt);

  // The same model declaring bytes: its 264 scores are not 256 tokens.
  std::ifstream in(dir / "gpt.yaml");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string declared = "{type: bpe, vocab: vocab.json, merges: merges.txt}";
  text.replace(text.find(declared), declared.size(), "{type: bytes}");
  std::ofstream(dir / "bytes.yaml") << text;
  CHECK_THROWS_WITH_AS(InferenceModel(dir / "bytes.yaml", dir / "gpt.safetensors"),
                       doctest::Contains("bytes.yaml:3:14: model.tokenizer: the bytes tokenizer has 256 tokens but the model scores 264"),
                       ConfigError);
}
