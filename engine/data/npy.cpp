#include "engine/data/npy.hpp"

#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/data/detail.hpp"
#include "engine/core/printable.hpp"

namespace tessera {

// .npy data is little-endian and copied as is.
static_assert(std::endian::native == std::endian::little,
              "the npy loader assumes a little-endian host");

namespace {


constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes, then major and minor version

struct NpyType {
  std::string_view descr;
  std::size_t item_size;
  DType dtype;  // what the engine stores it as
};
constexpr NpyType kTypes[] = {
    {"<f4", 4, DType::f32}, {"<f8", 8, DType::f32}, {"<i4", 4, DType::i32}, {"<i8", 8, DType::i64},
    {"|u1", 1, DType::i32}, {"|i1", 1, DType::i32}, {"|b1", 1, DType::i32},
};

std::string known_descrs() {
  std::string out;
  for (const NpyType& t : kTypes) out += (out.empty() ? "'" : ", '") + std::string(t.descr) + "'";
  return out;
}

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// This reads exactly the subset numpy writes.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view what, const std::filesystem::path& source)
      : text_(text), what_(what), source_(source) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    expect('{');
    for (;;) {
      skip_space();
      if (eat('}')) break;
      std::string key = string_literal();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (peek() == '[') fail("structured dtypes are not supported");
        h.descr = string_literal();
        seen_descr = true;
      } else if (key == "fortran_order") {
        std::string value = identifier();
        if (value != "True" && value != "False") fail("fortran_order is '" + printable(value) + "'");
        h.fortran_order = value == "True";
        seen_order = true;
      } else if (key == "shape") {
        h.shape = shape_tuple();
        seen_shape = true;
      } else {
        fail("unexpected key '" + printable(key) + "'");
      }
      skip_space();
      if (eat(',')) continue;
      expect('}');
      break;
    }
    if (!seen_descr || !seen_order || !seen_shape)
      fail("the header lacks one of 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw file_error(what_, source_,
                     "bad .npy header: " + message + " in \"" + std::string(text_) + "\"");
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (peek() != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "' at offset " + std::to_string(pos_));
  }
  std::string string_literal() {
    skip_space();
    char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a string at offset " + std::to_string(pos_));
    std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  std::string identifier() {
    std::size_t start = pos_;
    while (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  std::vector<std::int64_t> shape_tuple() {
    std::vector<std::int64_t> dims;
    expect('(');
    for (;;) {
      skip_space();
      if (eat(')')) break;
      std::size_t start = pos_;
      std::int64_t d = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (d > (std::numeric_limits<std::int64_t>::max() - 9) / 10) fail("shape extent too large");
        d = d * 10 + (text_[pos_++] - '0');
      }
      if (pos_ == start) fail("expected a shape extent at offset " + std::to_string(pos_));
      if (peek() == 'L') ++pos_;  // Python 2 long literal
      dims.push_back(d);
      if (eat(',')) continue;
      expect(')');
      break;
    }
    return dims;
  }

  std::string_view text_;
  std::string_view what_;
  const std::filesystem::path& source_;
  std::size_t pos_ = 0;
};

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

template <typename From, typename To>
void convert(const std::uint8_t* src, To* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    From v;
    std::memcpy(&v, src + i * static_cast<std::int64_t>(sizeof(From)), sizeof v);
    dst[i] = static_cast<To>(v);
  }
}

}  // namespace

namespace data_detail {

Tensor parse_npy(const std::uint8_t* data, std::size_t size, std::string_view what,
                 const std::filesystem::path& source) {
  if (size < 10 || std::memcmp(data, kMagic, 6) != 0)
    throw file_error(what, source, "not a .npy file (no \\x93NUMPY magic)");
  const int major = data[6];
  std::size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = load_le16(data + 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) throw file_error(what, source, "truncated .npy header");
    header_len = load_le32(data + 8);
    header_start = 12;
  } else {
    throw file_error(what, source,
                     ".npy format version " + std::to_string(major) + "." +
                         std::to_string(data[7]) + " (known: 1.0 to 3.0)");
  }
  if (header_start + header_len > size)
    throw file_error(what, source,
                     "truncated .npy header: it claims " + std::to_string(header_len) +
                         " bytes, the file has " + std::to_string(size - header_start));
  std::string_view text(reinterpret_cast<const char*>(data + header_start), header_len);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\0'))
    text.remove_suffix(1);
  NpyHeader header = HeaderParser(text, what, source).parse();

  const NpyType* type = nullptr;
  for (const NpyType& t : kTypes)
    if (t.descr == header.descr) type = &t;
  if (type == nullptr)
    throw file_error(
        what, source,
        "dtype '" + printable(header.descr) + "' is not supported (known: " + known_descrs() + ")");
  if (header.fortran_order)
    throw file_error(what, source,
                     "fortran_order is True; only C-order arrays are supported "
                     "(save np.ascontiguousarray(a))");

  std::uint64_t numel = 1;
  bool overflow = false;
  for (std::int64_t d : header.shape) {
    auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && numel > std::numeric_limits<std::uint64_t>::max() / type->item_size / u)
      overflow = true;
    numel *= u;
  }
  const std::size_t payload = size - header_start - header_len;
  if (overflow || numel * type->item_size != payload)
    throw file_error(
        what, source,
        "data size does not match the header (" + header.descr + " " + shape_text(header.shape) +
            "): expected " +
            (overflow ? std::string("more than 2^64") : std::to_string(numel * type->item_size)) +
            " bytes, got " + std::to_string(payload));

  const std::uint8_t* src = data + header_start + header_len;
  Tensor t = Tensor::empty(Shape(header.shape), type->dtype);
  const auto n = static_cast<std::int64_t>(numel);
  if (type->descr == "<f8") {
    convert<double>(src, t.data<float>(), n);
  } else if (type->descr == "|u1") {
    convert<std::uint8_t>(src, t.data<std::int32_t>(), n);
  } else if (type->descr == "|i1") {
    convert<std::int8_t>(src, t.data<std::int32_t>(), n);
  } else if (type->descr == "|b1") {
    std::int32_t* dst = t.data<std::int32_t>();
    for (std::int64_t i = 0; i < n; ++i) dst[i] = src[i] != 0;
  } else {
    std::memcpy(t.raw_data(), src, t.nbytes());  // the stored type is the engine's
  }
  // As the CSV reader: a NaN or an infinity (a float64 beyond float32's range
  // becomes one) would train or predict meaningless numbers without a word.
  if (t.dtype() == DType::f32) {
    const float* values = t.data<float>();
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(values[i]))
        throw file_error(what, source,
                         "element " + std::to_string(i) + " is " +
                             (std::isnan(values[i]) ? std::string("NaN") : std::string("infinite")) +
                             (type->descr == "<f8" && !std::isnan(values[i]) ? " in float32 (beyond its range)" : "") +
                             "; the data must be finite numbers");
  }
  return t;
}

}  // namespace data_detail

Tensor load_npy(const std::filesystem::path& path) {
  auto file = data_detail::read_file(path, "load_npy");
  return data_detail::parse_npy(file.bytes.data(), file.bytes.size(), "load_npy", path);
}

void save_npy(const std::filesystem::path& path, const Tensor& tensor) {
  std::string_view descr;
  switch (tensor.dtype()) {
    case DType::f32:
      descr = "<f4";
      break;
    case DType::i32:
      descr = "<i4";
      break;
    case DType::i64:
      descr = "<i8";
      break;
    default:
      throw file_error(
          "save_npy", path,
          "cannot save " + tensor.describe() + ": .npy output supports f32, i32 and i64");
  }
  if (tensor.device().kind != DeviceKind::cpu)
    throw file_error("save_npy", path, "needs a CPU tensor, got " + tensor.describe());

  std::string header = "{'descr': '" + std::string(descr) +
                       "', 'fortran_order': False, 'shape': " + shape_text(tensor.shape().dims()) +
                       ", }";
  // numpy pads with spaces to a 64-byte boundary (magic, version, length
  // included) and ends the header with a newline.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xffff)
    throw file_error(
        "save_npy", path,
        "rank " + std::to_string(tensor.rank()) + " is too high for a .npy 1.0 header");
  std::uint8_t preamble[10] = {0x93,
                               'N',
                               'U',
                               'M',
                               'P',
                               'Y',
                               1,
                               0,
                               static_cast<std::uint8_t>(header.size() & 0xff),
                               static_cast<std::uint8_t>(header.size() >> 8)};
  write_file_atomic(path,
                                 {{preamble, sizeof preamble},
                                  {header.data(), header.size()},
                                  {tensor.raw_data(), tensor.nbytes()}},
                                 "save_npy");
}

}  // namespace tessera
