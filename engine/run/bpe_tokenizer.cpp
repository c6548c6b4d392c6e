#include "engine/run/bpe_tokenizer.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <queue>

#include <nlohmann/json.hpp>

#include "engine/core/error.hpp"
#include "engine/core/file_io.hpp"
#include "engine/run/unicode_classes.hpp"

namespace tessera {
namespace {

// One code point of UTF-8 text at `at`, its length in bytes, and whether it
// is valid UTF-8 (shortest form, no surrogate, at most U+10FFFF). An invalid
// byte is read alone; the pattern classes it as a symbol (neither letter,
// number nor space), as no Unicode text holds it.
struct CodePoint {
  char32_t value;
  std::size_t bytes;
  bool valid = true;
};

CodePoint read_code_point(std::string_view s, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(at);
  if (lead < 0x80) return {lead, 1};
  const std::size_t length = (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
  const CodePoint invalid{lead, 1, false};
  if (length == 0 || at + length > s.size()) return invalid;
  char32_t value = lead & (0x7f >> length);
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xc0) != 0x80) return invalid;
    value = (value << 6) | (byte(at + i) & 0x3f);
  }
  constexpr char32_t kShortest[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < kShortest[length] || (value >= 0xd800 && value <= 0xdfff) || value > 0x10ffff) return invalid;
  return {value, length};
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
  }
}

struct Range {
  char32_t first, last;
};

template <std::size_t N>
bool in_ranges(char32_t c, const std::array<Range, N>& ranges) {
  for (const Range& r : ranges)
    if (c >= r.first && c <= r.last) return true;
  return false;
}

// \s: Unicode's White_Space.
bool is_space(char32_t c) {
  static constexpr std::array<Range, 9> kSpaces = {{{0x09, 0x0d}, {0x20, 0x20}, {0x85, 0x85}, {0xa0, 0xa0},
                                                    {0x1680, 0x1680}, {0x2000, 0x200a}, {0x2028, 0x2029},
                                                    {0x202f, 0x202f}, {0x205f, 0x205f}}};
  return c == 0x3000 || in_ranges(c, kSpaces);
}

enum class Class { letter, number, space, other };

Class class_of(CodePoint point) {
  const char32_t c = point.value;
  if (!point.valid) return Class::other;
  if (is_space(c)) return Class::space;
  if (unicode_letter(c)) return Class::letter;
  if (unicode_number(c)) return Class::number;
  return Class::other;
}

// Where the run of code points of class `k` from `at` ends.
std::size_t run_end(std::string_view s, std::size_t at, Class k) {
  while (at < s.size()) {
    const CodePoint c = read_code_point(s, at);
    if (class_of(c) != k) break;
    at += c.bytes;
  }
  return at;
}

// The length of the contraction at `at` ('s 't 're 've 'm 'll 'd), or 0.
std::size_t contraction(std::string_view s, std::size_t at) {
  if (s[at] != '\'') return 0;
  for (std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
    if (s.substr(at, c.size()) == c) return c.size();
  return 0;
}

const std::array<char32_t, 256>& byte_symbols() {
  static const std::array<char32_t, 256> symbols = [] {
    std::array<char32_t, 256> s{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      s[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return s;
  }();
  return symbols;
}

}  // namespace

char32_t gpt2_byte_symbol(std::uint8_t b) { return byte_symbols()[b]; }

std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = at + contraction(text, at);
    if (end == at) {
      // ` ?` then a run of one class: letters, numbers or other symbols.
      const std::size_t after_space = text[at] == ' ' && at + 1 < text.size() ? at + 1 : at;
      const Class k = class_of(read_code_point(text, after_space));
      if (k != Class::space) {
        end = run_end(text, after_space, k);
      } else {  // whitespace: the run, less its last character when a non-space follows (\s+(?!\S)), else one
        end = run_end(text, at, Class::space);
        if (end < text.size()) {
          std::size_t last = at;
          for (std::size_t i = at; i < end; i += read_code_point(text, i).bytes) last = i;
          end = last > at ? last : end;
        }
      }
    }
    pieces.push_back(text.substr(at, end - at));
    at = end;
  }
  return pieces;
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw file_error("bpe tokenizer", path, std::string("cannot open: ") + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw file_error("bpe tokenizer", path, "cannot be read (a folder?)");
  return text;
}

BpeTokenizer BpeTokenizer::from_files(const std::filesystem::path& vocab, const std::filesystem::path& merges) {
  const std::string vocab_json = read_text(vocab);  // its file read first: a missing one is named first
  return BpeTokenizer(vocab_json, read_text(merges), "'" + vocab.string() + "'", "'" + merges.string() + "'");
}

BpeTokenizer::BpeTokenizer(std::string_view vocab_json, std::string_view merges_text, const std::string& vocab_label,
                           const std::string& merges_label) {
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(vocab_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error("bpe tokenizer: " + vocab_label + " is not JSON: " + e.what());
  }
  if (!vocab.is_object() || vocab.empty())
    throw Error("bpe tokenizer: " + vocab_label + " must be a JSON object of token strings to ids");
  tokens_.resize(vocab.size());
  std::vector<bool> given(vocab.size(), false);
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= static_cast<std::int64_t>(vocab.size()))
      throw Error("bpe tokenizer: " + vocab_label + ": token '" + token + "' has id " + id.dump() + ", expected 0 to " +
                  std::to_string(vocab.size() - 1) + " (one id per token)");
    const auto i = id.get<std::int32_t>();
    if (given[static_cast<std::size_t>(i)])
      throw Error("bpe tokenizer: " + vocab_label + ": id " + std::to_string(i) + " is given to '" +
                  tokens_[static_cast<std::size_t>(i)] + "' and '" + token + "'");
    given[static_cast<std::size_t>(i)] = true;
    tokens_[static_cast<std::size_t>(i)] = token;
    ids_.emplace(token, i);
  }
  for (int b = 0; b < 256; ++b) {  // every byte must encode
    std::string symbol;
    append_utf8(symbol, gpt2_byte_symbol(static_cast<std::uint8_t>(b)));
    if (!ids_.contains(symbol))
      throw Error("bpe tokenizer: " + vocab_label + " has no token for byte " + std::to_string(b) + " ('" + symbol +
                  "'): a byte-level vocabulary holds all 256");
  }
  std::size_t line_start = 0;
  std::int32_t rank = 0;
  for (int line = 1; line_start < merges_text.size(); ++line) {
    std::size_t line_end = merges_text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = merges_text.size();
    std::string_view text = merges_text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    if (text.empty() || text.starts_with("#version")) continue;
    const std::size_t space = text.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == text.size() ||
        text.find(' ', space + 1) != std::string_view::npos)
      throw Error("bpe tokenizer: " + merges_label + ":" + std::to_string(line) + ": expected two symbols and one space "
                  "between them, got '" + std::string(text) + "'");
    if (!ids_.contains(std::string(text.substr(0, space)) + std::string(text.substr(space + 1))))
      throw Error("bpe tokenizer: " + merges_label + ":" + std::to_string(line) + ": the merge of '" + std::string(text) +
                  "' is not a token of " + vocab_label);
    ranks_[std::string(text)] = rank++;  // a pair listed twice: its last line, as GPT-2's encoder.py reads them
  }
}

// The piece's bytes as symbols of the byte alphabet, merged pair by pair in
// the merges' order: the listed pair of lowest rank first, its occurrences
// left to right (GPT-2's result, as merges.txt lists a pair only after the
// merges that make its symbols). A queue of candidate pairs over a linked
// list of symbols keeps a long piece at n log n; a candidate whose symbols
// have grown since it was queued is stale and skipped.
std::vector<std::string> BpeTokenizer::merge(std::string_view piece) const {
  struct Symbol {
    std::string text;  // empty: merged into the symbol before it
    std::int64_t next;
  };
  struct Candidate {
    std::int32_t rank;
    std::int64_t left;
    std::size_t left_size, right_size;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  std::vector<Symbol> symbols;
  std::vector<std::int64_t> previous;
  for (std::size_t i = 0; i < piece.size(); ++i) {
    std::string text;
    append_utf8(text, gpt2_byte_symbol(static_cast<std::uint8_t>(piece[i])));
    symbols.push_back({std::move(text), i + 1 < piece.size() ? static_cast<std::int64_t>(i + 1) : -1});
    previous.push_back(static_cast<std::int64_t>(i) - 1);
  }
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto consider = [&](std::int64_t left) {
    if (left < 0) return;
    const Symbol& l = symbols[static_cast<std::size_t>(left)];
    if (l.next < 0) return;
    const Symbol& r = symbols[static_cast<std::size_t>(l.next)];
    if (auto it = ranks_.find(l.text + " " + r.text); it != ranks_.end())
      queue.push({it->second, left, l.text.size(), r.text.size()});
  };
  for (std::size_t i = 0; i < symbols.size(); ++i) consider(static_cast<std::int64_t>(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = symbols[static_cast<std::size_t>(c.left)];
    if (l.text.size() != c.left_size || l.next < 0) continue;
    Symbol& r = symbols[static_cast<std::size_t>(l.next)];
    if (r.text.size() != c.right_size) continue;
    l.text += r.text;
    r.text.clear();
    l.next = r.next;
    if (l.next >= 0) previous[static_cast<std::size_t>(l.next)] = c.left;
    consider(previous[static_cast<std::size_t>(c.left)]);
    consider(c.left);
  }
  std::vector<std::string> merged;
  for (std::int64_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next)
    merged.push_back(std::move(symbols[static_cast<std::size_t>(i)].text));
  return merged;
}

void BpeTokenizer::set_end_of_text(const std::string& token) {
  const auto it = ids_.find(token);
  if (it == ids_.end()) throw Error("bpe tokenizer: the end of text '" + token + "' is not a token of the vocabulary");
  end_of_text_ = it->second;
  // The bytes that stand for it in a text; none where it is not made of byte
  // symbols (a special token outside the alphabet is never written out).
  try {
    const std::int32_t id[] = {it->second};
    end_of_text_bytes_ = decode(id);
  } catch (const Error&) {
    end_of_text_bytes_.clear();
  }
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  const auto plain = [&](std::string_view part) {
    for (std::string_view piece : gpt2_pieces(part))
      for (const std::string& symbol : merge(piece)) ids.push_back(ids_.at(symbol));  // every merge is a token (checked)
  };
  // The end of text written out in a prompt (documents joined by it) is that token, as GPT-2's users write it.
  const std::string_view end = end_of_text_bytes_;
  for (std::size_t at = 0;;) {
    const std::size_t found = end.empty() ? std::string_view::npos : text.find(end, at);
    plain(text.substr(at, found == std::string_view::npos ? std::string_view::npos : found - at));
    if (found == std::string_view::npos) break;
    ids.push_back(*end_of_text_);
    at = found + end.size();
  }
  return ids;
}

std::string BpeTokenizer::decode(std::span<const std::int32_t> tokens) const {
  static const std::unordered_map<char32_t, char> bytes = [] {
    std::unordered_map<char32_t, char> m;
    for (int b = 0; b < 256; ++b) m.emplace(gpt2_byte_symbol(static_cast<std::uint8_t>(b)), static_cast<char>(b));
    return m;
  }();
  std::string text;
  for (std::int32_t t : tokens) {
    if (t < 0 || t >= vocabulary_size())
      throw Error("bpe tokenizer: token " + std::to_string(t) + " is outside the vocabulary (0 to " +
                  std::to_string(vocabulary_size() - 1) + ")");
    const std::string& token = tokens_[static_cast<std::size_t>(t)];
    for (std::size_t at = 0; at < token.size();) {
      const CodePoint c = read_code_point(token, at);
      const auto byte = bytes.find(c.value);
      if (byte == bytes.end())  // not a vocabulary of byte symbols
        throw Error("bpe tokenizer: token " + std::to_string(t) + " ('" + token + "') is not made of byte symbols");
      text.push_back(byte->second);
      at += c.bytes;
    }
  }
  return text;
}

}  // namespace tessera
