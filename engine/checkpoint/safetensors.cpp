#include "engine/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <system_error>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "engine/core/byte_order.hpp"
#include "engine/core/file_io.hpp"
#include "engine/core/printable.hpp"

namespace tessera {
namespace {

// The format stores little-endian bytes; tensors are written and read as they
// lie in memory.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O copies tensor bytes as they are: a little-endian host is assumed");

using Json = nlohmann::ordered_json;  // keeps the writer's order, and the file's on reading

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::i64, "I64"}};

std::string errno_text(int error) { return std::generic_category().message(error); }

// A read-only file descriptor, closed on scope exit.
class ReadFd {
 public:
  explicit ReadFd(const std::filesystem::path& path)
      : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~ReadFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReadFd(ReadFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `size` bytes at `offset`; false on a short read (the file
// shrank underneath) or an I/O error (errno set).
bool read_at(int fd, void* out, std::size_t size, std::uint64_t offset) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

std::string shape_text(const std::vector<std::int64_t>& dims) { return Shape(dims).str(); }

std::string offsets_text(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// One header entry, checked.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> dims;
  std::uint64_t begin = 0, end = 0;
};

constexpr const char* kChecksumKey = "tessera.crc32";

// Reads the "tessera.crc32" metadata value into `tensors`.
template <typename MakeError>
void read_checksums(const std::string& text, std::vector<SafetensorsEntry>& tensors, const MakeError& error) {
  Json checksums;
  try {
    checksums = Json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw error(std::string("metadata '") + kChecksumKey + "' is not a JSON object");
  }
  if (!checksums.is_object()) throw error(std::string("metadata '") + kChecksumKey + "' is not a JSON object");
  for (SafetensorsEntry& entry : tensors) {
    const auto it = checksums.find(entry.name);
    if (it == checksums.end()) continue;
    const std::string value = it->is_string() ? it->get<std::string>() : "";
    if (value.size() != 8 || value.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw error("tensor '" + entry.name + "': its checksum in metadata '" + kChecksumKey + "' is " + it->dump() +
                  ", not 8 hex digits");
    entry.crc32 = static_cast<std::uint32_t>(std::stoul(value, nullptr, 16));
  }
}

// Reads and checks the header of the open file `fd` (at `path`); `what` names
// the caller in messages.
SafetensorsHeader read_header(int fd, const std::filesystem::path& path, const char* what) {
  auto error = [&](const std::string& message) {
    return CheckpointError(std::string(what) + ": '" + path.string() + "': " + message);
  };
  auto tensor_error = [&](const std::string& name, const std::string& message) {
    return error("tensor '" + printable(name) + "': " + message);
  };

  struct stat info {};
  if (::fstat(fd, &info) != 0) throw error("cannot read its size: " + errno_text(errno));
  const auto file_size = static_cast<std::uint64_t>(info.st_size);
  if (file_size < 8)
    throw error("the file has " + std::to_string(file_size) +
                " bytes, fewer than the 8 of the header length (truncated?)");

  std::uint8_t length_bytes[8];
  if (!read_at(fd, length_bytes, 8, 0)) throw error("cannot read the header length");
  const std::uint64_t header_size = load_le64(length_bytes);
  if (header_size > file_size - 8)
    throw error("the header length is " + std::to_string(header_size) + " bytes but only " +
                std::to_string(file_size - 8) +
                " follow it (a truncated file, or not a safetensors file)");
  const std::uint64_t data_size = file_size - 8 - header_size;

  std::string text(static_cast<std::size_t>(header_size), '\0');
  if (!read_at(fd, text.data(), text.size(), 8)) throw error("cannot read the header");
  // Duplicate top-level keys would silently shadow one another in the parsed
  // object: note them while parsing.
  std::set<std::string> keys;
  std::string duplicate;
  Json::parser_callback_t note_keys = [&](int depth, nlohmann::json::parse_event_t event,
                                          Json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, note_keys);
  } catch (const nlohmann::json::exception& e) {
    throw error("the header is not valid JSON: " + printable(e.what()));
  }
  if (!header.is_object()) throw error("the header is not a JSON object");
  if (!duplicate.empty()) throw error("the header names '" + duplicate + "' twice");

  SafetensorsHeader out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw error("__metadata__ is not a JSON object");
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string())
          throw error("__metadata__ maps strings to strings, but '" + key + "' is " +
                      item.type_name());
        out.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) throw tensor_error(name, "the entry is not a JSON object");
    for (const auto& [key, item] : value.items())
      if (key != "dtype" && key != "shape" && key != "data_offsets")
        throw tensor_error(name, "unknown key '" + key + "' (known: dtype, shape, data_offsets)");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!value.contains(key)) throw tensor_error(name, std::string("has no '") + key + "'");

    Entry entry;
    entry.name = name;
    const Json& dtype = value["dtype"];
    if (!dtype.is_string()) throw tensor_error(name, "dtype is not a string");
    const std::optional<DType> known = parse_safetensors_dtype(dtype.get<std::string>());
    if (!known)
      throw tensor_error(name, "dtype '" + dtype.get<std::string>() +
                                   "' is not one Tessera reads (F32, BF16, I32, I64)");
    entry.dtype = *known;

    const Json& shape = value["shape"];
    if (!shape.is_array()) throw tensor_error(name, "shape is not an array");
    std::uint64_t numel = 1;
    bool too_large = false;
    for (const Json& dim : shape) {
      if (!dim.is_number_unsigned())  // the parser gives non-negative integers this type
        throw tensor_error(name, "shape " + shape.dump() + " has an entry that is not a size");
      const auto extent = dim.get<std::uint64_t>();
      if (extent > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
          __builtin_mul_overflow(numel, extent, &numel))
        too_large = true;
      entry.dims.push_back(static_cast<std::int64_t>(extent));
    }
    std::uint64_t bytes = 0;
    if (too_large || numel > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        __builtin_mul_overflow(numel, dtype_size(entry.dtype), &bytes))
      throw tensor_error(name, "shape " + shape.dump() + " is too large");

    const Json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      throw tensor_error(name, "data_offsets " + offsets.dump() +
                                   " is not a pair [begin, end] of byte offsets");
    entry.begin = offsets[0].get<std::uint64_t>();
    entry.end = offsets[1].get<std::uint64_t>();
    if (entry.begin > entry.end)
      throw tensor_error(name, "data_offsets " + offsets_text(entry.begin, entry.end) +
                                   " end before they begin");
    if (entry.end > data_size)
      throw tensor_error(name, "data_offsets " + offsets_text(entry.begin, entry.end) +
                                   " run past the end of the data (" + std::to_string(data_size) +
                                   " bytes after the header; a truncated file?)");
    if (entry.end - entry.begin != bytes)
      throw tensor_error(name, dtype.get<std::string>() + shape_text(entry.dims) + " takes " +
                                   std::to_string(bytes) + " bytes but data_offsets " +
                                   offsets_text(entry.begin, entry.end) + " hold " +
                                   std::to_string(entry.end - entry.begin));
    entries.push_back(std::move(entry));
  }

  // The tensors tile the data: no overlaps, no gaps, nothing after the last
  // (what the reference reader requires). Empty tensors occupy nothing.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (entry.begin < covered)
      throw tensor_error(entry.name, "data_offsets " + offsets_text(entry.begin, entry.end) +
                                         " overlap tensor '" + previous->name + "' at " +
                                         offsets_text(previous->begin, previous->end));
    if (entry.begin > covered)
      throw tensor_error(entry.name, "data_offsets " + offsets_text(entry.begin, entry.end) +
                                         " leave a gap of " +
                                         std::to_string(entry.begin - covered) +
                                         " bytes before them");
    covered = entry.end;
    previous = &entry;
  }
  if (covered != data_size)
    throw error("the tensors cover " + std::to_string(covered) + " of the " +
                std::to_string(data_size) + " data bytes; the rest belongs to no tensor");

  const std::uint64_t data_start = 8 + header_size;
  out.tensors.reserve(entries.size());
  for (Entry& entry : entries)
    out.tensors.push_back({std::move(entry.name), entry.dtype, std::move(entry.dims),
                           data_start + entry.begin, entry.end - entry.begin, std::nullopt});
  if (auto found = out.metadata.find(kChecksumKey); found != out.metadata.end()) {
    read_checksums(found->second, out.tensors, error);
    out.metadata.erase(found);  // the format's, not the user's
  }
  return out;
}

// `path` opened for reading, or a CheckpointError naming it.
ReadFd open_for_reading(const std::filesystem::path& path, const char* what) {
  auto error = [&](const std::string& message) {
    return CheckpointError(std::string(what) + ": '" + path.string() + "': " + message);
  };
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw error("is a directory");
  ReadFd fd(path);
  if (fd.get() < 0) throw error("cannot open: " + errno_text(errno));
  return fd;
}

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  throw DTypeError("safetensors: no name for dtype " + std::string(dtype_name(dtype)));
}

std::optional<DType> parse_safetensors_dtype(std::string_view name) {
  for (const auto& d : kDTypeNames)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::uint32_t crc32_of(const void* data, std::size_t bytes, std::uint32_t crc) {
  return static_cast<std::uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

std::string checksum_mismatch(std::uint32_t recorded, std::uint32_t found) {
  return "its bytes do not match the checksum saved with them (CRC-32 " + fmt::format("{:08x}", recorded) + " saved, " + fmt::format("{:08x}", found) +
         " read): the file is damaged";
}

namespace {
// What save_safetensors can write of tensor `name`: a defined host tensor.
void check_writable(const std::filesystem::path& path, const std::string& name, const Tensor& tensor) {
  std::string problem;
  if (!tensor.defined()) problem = "is undefined (it has no storage)";
  else if (tensor.device().kind != DeviceKind::cpu)
    problem = "is " + tensor.describe() + "; only host tensors are written (copy it to the CPU first)";
  if (!problem.empty())
    throw CheckpointError("save_safetensors: '" + path.string() + "': tensor '" + name + "' " + problem);
}
}  // namespace

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    check_writable(path, name, tensor);  // every tensor before anything is written
    entries.push_back({name, tensor.dtype(), tensor.shape()});
  }
  if (metadata.count(kChecksumKey))
    throw CheckpointError("save_safetensors: '" + path.string() + "': metadata '" + kChecksumKey +
                          "' is reserved (the writer computes it)");
  Json checksums = Json::object();
  for (const auto& [name, tensor] : tensors) checksums[name] = fmt::format("{:08x}", crc32_of(tensor.raw_data(), tensor.nbytes()));
  std::map<std::string, std::string> with_checksums = metadata;
  try {
    with_checksums[kChecksumKey] = checksums.dump();
  } catch (const nlohmann::json::exception& e) {  // names must be UTF-8
    throw CheckpointError("save_safetensors: '" + path.string() + "': cannot encode the header: " + e.what());
  }
  const auto whole = [&](std::size_t i, std::int64_t, std::int64_t) { return tensors[i].second; };
  save_safetensors(path, entries, whole, std::numeric_limits<std::uint64_t>::max(), with_checksums);
}

void save_safetensors(const std::filesystem::path& path, const std::vector<TensorSpec>& entries, const RowsOf& rows,
                      std::uint64_t piece_bytes, const std::map<std::string, std::string>& metadata) {
  auto error = [&](const std::string& message) {
    return CheckpointError("save_safetensors: '" + path.string() + "': " + message);
  };
  Json header = Json::object();
  if (!metadata.empty()) {  // first, as the reference writer puts it
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::unordered_set<std::string> names;
  std::uint64_t offset = 0;
  for (const TensorSpec& entry : entries) {
    if (entry.name == "__metadata__") throw error("'__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(entry.name).second) throw error("tensor '" + entry.name + "' appears twice");
    const std::uint64_t bytes = static_cast<std::uint64_t>(entry.shape.numel()) * dtype_size(entry.dtype);
    header[entry.name] = Json{{"dtype", safetensors_dtype_name(entry.dtype)},
                              {"shape", entry.shape.dims()},
                              {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // names and metadata must be UTF-8
    throw error(std::string("cannot encode the header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(text.size() >> (8 * i));
  // The length, the header, then each tensor's bytes, a piece of rows at a
  // time, each made as it is written.
  int headers_written = 0;
  std::size_t entry_index = 0;
  std::int64_t next_row = 0;  // of entries[entry_index]
  Tensor current;
  auto next = [&](ByteRange& out) {
    if (headers_written < 2) {
      out = headers_written++ == 0 ? ByteRange{length, sizeof length} : ByteRange{text.data(), text.size()};
      return true;
    }
    if (entry_index == entries.size()) return false;
    const TensorSpec& entry = entries[entry_index];
    const std::int64_t row_count = entry.shape.rank() == 0 ? 1 : entry.shape[0];
    const std::uint64_t row_bytes = row_count == 0 ? 0 : entry.shape.numel() / row_count * dtype_size(entry.dtype);
    const auto fit = static_cast<std::int64_t>(
        row_bytes == 0 ? row_count : std::min<std::uint64_t>(piece_bytes / row_bytes, static_cast<std::uint64_t>(row_count)));
    const std::int64_t begin = next_row, end = std::min(row_count, begin + std::max<std::int64_t>(1, fit));
    Shape piece = entry.shape;
    if (entry.shape.rank() > 0) {
      std::vector<std::int64_t> dims = entry.shape.dims();
      dims[0] = end - begin;
      piece = Shape(dims);
    }
    current = Tensor();  // the previous piece is written: release it first
    current = rows(entry_index, begin, end);
    check_writable(path, entry.name, current);
    if (current.dtype() != entry.dtype || current.shape() != piece)
      throw error("tensor '" + entry.name + "' rows [" + std::to_string(begin) + ", " + std::to_string(end) + ") are " +
                  current.describe() + ", not the " + std::string(dtype_name(entry.dtype)) + piece.str() +
                  " its header entry " + std::string(dtype_name(entry.dtype)) + entry.shape.str() + " says");
    out = {current.nbytes() > 0 ? current.raw_data() : nullptr, current.nbytes()};
    next_row = end;
    if (next_row >= row_count) {  // the entry is done (an empty one in one empty piece)
      ++entry_index;
      next_row = 0;
    }
    return true;
  };
  try {
    write_file_atomic(path, next, "save_safetensors");
  } catch (const DataError& e) {
    throw CheckpointError(e.what());
  }
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const SafetensorsEntry& entry : tensors)
    if (entry.name == name) return &entry;
  return nullptr;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  ReadFd fd = open_for_reading(path, "read_safetensors_header");
  return read_header(fd.get(), path, "read_safetensors_header");
}

SafetensorsFile load_safetensors(const std::filesystem::path& path) {
  const char* what = "load_safetensors";
  ReadFd fd = open_for_reading(path, what);
  SafetensorsHeader header = read_header(fd.get(), path, what);
  SafetensorsFile out;
  out.metadata = std::move(header.metadata);
  out.tensors.reserve(header.tensors.size());
  for (SafetensorsEntry& entry : header.tensors) {
    Tensor tensor = Tensor::empty(Shape(entry.shape), entry.dtype);
    if (tensor.nbytes() > 0 && !read_at(fd.get(), tensor.raw_data(), tensor.nbytes(), entry.offset))
      throw CheckpointError(std::string(what) + ": '" + path.string() + "': tensor '" + entry.name +
                            "': cannot read its data: " +
                            (errno != 0 ? errno_text(errno) : std::string("the file ended early")));
    if (entry.crc32) {
      const std::uint32_t found = crc32_of(tensor.raw_data(), tensor.nbytes());
      if (found != *entry.crc32)
        throw CheckpointError(std::string(what) + ": '" + path.string() + "': tensor '" + entry.name + "': " +
                              checksum_mismatch(*entry.crc32, found));
    }
    out.tensors.emplace_back(std::move(entry.name), std::move(tensor));
  }
  return out;
}

}  // namespace tessera
