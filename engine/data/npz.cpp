// .npz: a zip archive of .npy files. The reader walks the zip's central
// directory (the authoritative list; numpy's local headers carry zip64 extras
// whose sizes may be placeholders) and extracts stored or deflated entries.
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <limits>

#include "engine/data/detail.hpp"
#include "engine/data/npy.hpp"

namespace tessera {
namespace {


constexpr std::uint32_t kLocalHeaderSig = 0x04034b50;
constexpr std::uint32_t kCentralHeaderSig = 0x02014b50;
constexpr std::uint32_t kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::uint32_t kStored = 0, kDeflated = 8;
// Deflate expands at most about 1032:1 (a 258-byte match per 2 bits); 1040 leaves room for block headers.
constexpr std::uint64_t kMaxDeflateRatio = 1040;

struct ZipEntry {
  std::string name;
  std::uint16_t flags = 0;
  std::uint16_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t size = 0;
  std::uint64_t local_offset = 0;
};

class ZipReader {
 public:
  ZipReader(const std::vector<std::uint8_t>& bytes, std::string_view what,
            const std::filesystem::path& path)
      : bytes_(bytes), what_(what), path_(path) {
    read_central_directory();
  }

  const std::vector<ZipEntry>& entries() const { return entries_; }

  // The uncompressed bytes of `entry`, checked against its CRC-32.
  std::vector<std::uint8_t> extract(const ZipEntry& entry) const {
    const std::string where = "entry '" + entry.name + "': ";
    if (entry.flags & 1u) fail(where + "encrypted entries are not supported");
    need(entry.local_offset, 30, "local header of '" + entry.name + "'");
    const std::uint8_t* local = bytes_.data() + entry.local_offset;
    if (load_le32(local) != kLocalHeaderSig) fail(where + "bad local header signature");
    std::uint64_t start = entry.local_offset + 30 + load_le16(local + 26) + load_le16(local + 28);
    need(start, entry.compressed_size, "data of '" + entry.name + "'");
    const std::uint8_t* src = bytes_.data() + start;

    if (entry.method != kStored && entry.method != kDeflated)
      fail(where + "compression method " + std::to_string(entry.method) + " is not supported (stored and deflate are)");
    // The recorded size is checked against what the data can hold before it is
    // allocated: a few hundred bytes of archive must not claim gigabytes.
    if (entry.method == kStored && entry.compressed_size != entry.size)
      fail(where + "stored entry with differing sizes (" + std::to_string(entry.compressed_size) + " vs " +
           std::to_string(entry.size) + ")");
    if (entry.method == kDeflated && entry.size / kMaxDeflateRatio > entry.compressed_size)
      fail(where + "claims " + std::to_string(entry.size) + " bytes from " + std::to_string(entry.compressed_size) +
           " compressed bytes, more than deflate can expand to");
    std::vector<std::uint8_t> out(static_cast<std::size_t>(entry.size));
    if (entry.method == kStored) std::copy(src, src + entry.size, out.begin());
    else inflate_raw(src, entry.compressed_size, out, where);
    if (crc32_z(0, out.data(), out.size()) != entry.crc)
      fail(where + "CRC-32 mismatch (corrupt data)");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw file_error(what_, path_, message);
  }

  // Throws unless [offset, offset + length) lies inside the file.
  void need(std::uint64_t offset, std::uint64_t length, const std::string& what) const {
    if (offset > bytes_.size() || length > bytes_.size() - offset)
      fail("corrupt zip: " + what + " lies beyond the end of the file");
  }

  void read_central_directory() {
    // The end record sits in the last 22 + 65535 bytes (its comment is at most 64 KiB).
    const std::size_t n = bytes_.size();
    if (n < 22) fail("not a zip archive (too short)");
    std::size_t end = n - 22;
    const std::size_t lowest = n - 22 > 0xffff ? n - 22 - 0xffff : 0;
    while (load_le32(bytes_.data() + end) != kEndSig) {
      if (end == lowest) fail("not a zip archive (no end of central directory record)");
      --end;
    }
    const std::uint8_t* e = bytes_.data() + end;
    std::uint64_t count = load_le16(e + 10);
    std::uint64_t dir_size = load_le32(e + 12);
    std::uint64_t dir_offset = load_le32(e + 16);
    if (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) {
      // zip64: a locator just before the end record points at the zip64 end record.
      if (end < 20 || load_le32(e - 20) != kZip64LocatorSig)
        fail("corrupt zip64 archive (no locator)");
      std::uint64_t z = load_le64(e - 20 + 8);
      need(z, 56, "zip64 end record");
      const std::uint8_t* z64 = bytes_.data() + z;
      if (load_le32(z64) != kZip64EndSig) fail("corrupt zip64 archive (bad end record)");
      count = load_le64(z64 + 32);
      dir_size = load_le64(z64 + 40);
      dir_offset = load_le64(z64 + 48);
    }
    need(dir_offset, dir_size, "central directory");

    std::uint64_t pos = dir_offset;
    for (std::uint64_t i = 0; i < count; ++i) {
      need(pos, 46, "central directory entry " + std::to_string(i));
      const std::uint8_t* c = bytes_.data() + pos;
      if (load_le32(c) != kCentralHeaderSig) fail("corrupt zip: bad central directory signature");
      ZipEntry entry;
      entry.flags = load_le16(c + 8);
      entry.method = load_le16(c + 10);
      entry.crc = load_le32(c + 16);
      entry.compressed_size = load_le32(c + 20);
      entry.size = load_le32(c + 24);
      const std::uint16_t name_len = load_le16(c + 28), extra_len = load_le16(c + 30),
                          comment_len = load_le16(c + 32);
      entry.local_offset = load_le32(c + 42);
      need(pos + 46, std::uint64_t{name_len} + extra_len,
           "central directory entry " + std::to_string(i));
      entry.name.assign(reinterpret_cast<const char*>(c + 46), name_len);
      read_zip64_extra(c + 46 + name_len, extra_len, entry);
      entries_.push_back(std::move(entry));
      pos += 46 + std::uint64_t{name_len} + extra_len + comment_len;
    }
  }

  // Sizes and offsets that do not fit 32 bits are 0xffffffff in the entry and
  // follow, in this order, in the zip64 extra field (id 1).
  void read_zip64_extra(const std::uint8_t* extra, std::size_t length, ZipEntry& entry) const {
    std::size_t p = 0;
    while (p + 4 <= length) {
      std::uint16_t id = load_le16(extra + p), size = load_le16(extra + p + 2);
      if (p + 4 + size > length) break;
      if (id == 1) {
        std::size_t q = p + 4, field_end = p + 4 + size;
        for (std::uint64_t* field : {&entry.size, &entry.compressed_size, &entry.local_offset}) {
          if (*field != 0xffffffff) continue;
          if (q + 8 > field_end) fail("corrupt zip64 extra field of '" + entry.name + "'");
          *field = load_le64(extra + q);
          q += 8;
        }
      }
      p += 4 + std::size_t{size};
    }
  }

  void inflate_raw(const std::uint8_t* src, std::uint64_t src_size, std::vector<std::uint8_t>& out,
                   const std::string& where) const {
    z_stream stream{};
    if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) fail(where + "inflateInit2 failed");
    struct End {  // inflateEnd on every path out
      z_stream* s;
      ~End() { inflateEnd(s); }
    } end{&stream};
    // zlib counts in uInt: feed and drain in pieces of at most 1 GiB.
    constexpr std::uint64_t kPiece = 1u << 30;
    std::uint64_t in_left = src_size, out_left = out.size();
    stream.next_in = const_cast<Bytef*>(src);
    stream.next_out = out.data();
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (stream.avail_in == 0 && in_left > 0) {
        stream.avail_in = static_cast<uInt>(std::min(in_left, kPiece));
        in_left -= stream.avail_in;
      }
      if (stream.avail_out == 0 && out_left > 0) {
        stream.avail_out = static_cast<uInt>(std::min(out_left, kPiece));
        out_left -= stream.avail_out;
      }
      rc = inflate(&stream, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) break;
      if (rc == Z_BUF_ERROR && stream.avail_out == 0 && out_left == 0)
        fail(where + "inflates to more than its recorded " + std::to_string(out.size()) + " bytes");
      if (rc == Z_BUF_ERROR && stream.avail_in == 0 && in_left == 0)
        fail(where + "truncated deflate data");
      if (rc != Z_OK && rc != Z_BUF_ERROR)
        fail(where + "corrupt deflate data (" + (stream.msg ? stream.msg : "zlib error") + ")");
    }
    if (stream.total_out != out.size())
      fail(where + "inflates to " + std::to_string(stream.total_out) + " bytes, expected " +
           std::to_string(out.size()));
  }

  const std::vector<std::uint8_t>& bytes_;
  std::string_view what_;
  const std::filesystem::path& path_;
  std::vector<ZipEntry> entries_;
};

std::string strip_npy(const std::string& name) {
  return name.ends_with(".npy") ? name.substr(0, name.size() - 4) : name;
}

}  // namespace

Tensor load_npz(const std::filesystem::path& path, const std::string& name) {
  auto file = data_detail::read_file(path, "load_npz");
  ZipReader zip(file.bytes, "load_npz", path);
  for (const ZipEntry& entry : zip.entries()) {
    if (entry.name != name && entry.name != name + ".npy") continue;
    std::vector<std::uint8_t> npy = zip.extract(entry);
    return data_detail::parse_npy(npy.data(), npy.size(), "load_npz",
                                  path.string() + ":" + entry.name);
  }
  std::string names;
  for (const ZipEntry& entry : zip.entries())
    names += (names.empty() ? "'" : ", '") + strip_npy(entry.name) + "'";
  throw file_error(
      "load_npz", path,
      "no array '" + name + "'; it holds " + (names.empty() ? std::string("none") : names));
}

std::vector<std::string> npz_names(const std::filesystem::path& path) {
  auto file = data_detail::read_file(path, "npz_names");
  ZipReader zip(file.bytes, "npz_names", path);
  std::vector<std::string> names;
  for (const ZipEntry& entry : zip.entries()) names.push_back(strip_npy(entry.name));
  return names;
}

}  // namespace tessera
