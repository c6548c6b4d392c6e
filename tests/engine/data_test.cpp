#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <limits>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "tests/temp_dir.hpp"
#include "tests/test_util.hpp"
#include "backends/registry.hpp"
#include "engine/data/batch_iterator.hpp"
#include "engine/data/csv.hpp"
#include "engine/data/idx.hpp"
#include "engine/data/npy.hpp"
#include "engine/data/synthetic.hpp"
#include "engine/data/text.hpp"
#include "engine/run/run_config.hpp"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

using test::TempDir;

void write_file(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_text(const fs::path& path, const std::string& text) {
  write_file(path, Bytes(text.begin(), text.end()));
}

void write_gzip(const fs::path& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  CHECK(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
        static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void put_be32(Bytes& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<std::uint8_t>(v >> shift));
}
void put_le16(Bytes& b, std::uint32_t v) {
  b.push_back(static_cast<std::uint8_t>(v));
  b.push_back(static_cast<std::uint8_t>(v >> 8));
}
void put_le32(Bytes& b, std::uint32_t v) {
  put_le16(b, v & 0xffff);
  put_le16(b, v >> 16);
}

// IDX images (pixel (i, j) of image k = 10k + j + rows i) and labels (k % 10).
Bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  Bytes b;
  put_be32(b, 0x803);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t k = 0; k < n; ++k)
    for (std::uint32_t p = 0; p < rows * cols; ++p)
      b.push_back(static_cast<std::uint8_t>(10 * k + p));
  return b;
}
Bytes idx_labels(std::uint32_t n) {
  Bytes b;
  put_be32(b, 0x801);
  put_be32(b, n);
  for (std::uint32_t k = 0; k < n; ++k) b.push_back(static_cast<std::uint8_t>(k % 10));
  return b;
}

// Runs `f`, which must throw DataError, and returns its message.
template <typename F>
std::string data_error_of(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("expected a DataError");
  return {};
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A .npy file by hand, for dtypes and flags save_npy does not write.
Bytes npy_bytes(const std::string& header_dict, const Bytes& payload) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  Bytes b{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  put_le16(b, static_cast<std::uint32_t>(header.size()));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes raw_deflate(const Bytes& in) {
  z_stream s{};
  REQUIRE(deflateInit2(&s, Z_BEST_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK);
  Bytes out(deflateBound(&s, static_cast<uLong>(in.size())));
  s.next_in = const_cast<Bytef*>(in.data());
  s.avail_in = static_cast<uInt>(in.size());
  s.next_out = out.data();
  s.avail_out = static_cast<uInt>(out.size());
  CHECK(deflate(&s, Z_FINISH) == Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

struct ZipMember {
  std::string name;
  Bytes data;
  bool deflate;
};

// A zip archive written by hand: local headers, central directory, end record.
Bytes make_zip(const std::vector<ZipMember>& members) {
  Bytes zip, central;
  for (const ZipMember& m : members) {
    const Bytes stored = m.deflate ? raw_deflate(m.data) : m.data;
    const auto crc =
        static_cast<std::uint32_t>(crc32(0, m.data.data(), static_cast<uInt>(m.data.size())));
    const auto offset = static_cast<std::uint32_t>(zip.size());
    const std::uint32_t method = m.deflate ? 8 : 0;
    auto common = [&](Bytes& b) {  // version needed .. extra length
      put_le16(b, 20);
      put_le16(b, 0);
      put_le16(b, method);
      put_le16(b, 0);
      put_le16(b, 0x21);
      put_le32(b, crc);
      put_le32(b, static_cast<std::uint32_t>(stored.size()));
      put_le32(b, static_cast<std::uint32_t>(m.data.size()));
      put_le16(b, static_cast<std::uint32_t>(m.name.size()));
      put_le16(b, 0);
    };
    put_le32(zip, 0x04034b50);
    common(zip);
    zip.insert(zip.end(), m.name.begin(), m.name.end());
    zip.insert(zip.end(), stored.begin(), stored.end());

    put_le32(central, 0x02014b50);
    put_le16(central, 20);  // version made by
    common(central);
    put_le16(central, 0);  // comment length
    put_le16(central, 0);  // disk
    put_le16(central, 0);  // internal attributes
    put_le32(central, 0);  // external attributes
    put_le32(central, offset);
    central.insert(central.end(), m.name.begin(), m.name.end());
  }
  const auto dir_offset = static_cast<std::uint32_t>(zip.size());
  zip.insert(zip.end(), central.begin(), central.end());
  put_le32(zip, 0x06054b50);
  put_le16(zip, 0);
  put_le16(zip, 0);
  put_le16(zip, static_cast<std::uint32_t>(members.size()));
  put_le16(zip, static_cast<std::uint32_t>(members.size()));
  put_le32(zip, static_cast<std::uint32_t>(central.size()));
  put_le32(zip, dir_offset);
  put_le16(zip, 0);
  return zip;
}

// Samples whose every value encodes its index: inputs[i] = (100 i, 100 i + 1,
// 100 i + 2), targets[i] = i.
Dataset indexed_dataset(std::int64_t n) {
  std::vector<float> inputs;
  std::vector<std::int32_t> targets;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < 3; ++k) inputs.push_back(static_cast<float>(100 * i + k));
    targets.push_back(static_cast<std::int32_t>(i));
  }
  return Dataset{Tensor::from_vector(inputs, Shape{n, 3}), Tensor::from_vector(targets, Shape{n}),
                 "indexed"};
}

// The batches of one epoch, each as its targets, also checking that every
// input row belongs to its target.
std::vector<std::vector<std::int32_t>> epoch_batches(BatchIterator& it) {
  std::vector<std::vector<std::int32_t>> out;
  Batch batch;
  while (it.next(batch)) {
    auto targets = batch.targets.to_vector<std::int32_t>();
    auto inputs = batch.inputs.to_vector<float>();
    REQUIRE(static_cast<std::int64_t>(targets.size()) == batch.size);
    for (std::size_t r = 0; r < targets.size(); ++r)
      CHECK(inputs[3 * r + 1] == 100.0f * targets[r] + 1);
    out.push_back(std::move(targets));
  }
  return out;
}

}  // namespace

TEST_CASE("data_test: load_idx reads plain and gzipped IDX files") {
  TempDir dir;
  write_file(dir / "images", idx_images(3, 2, 4));
  write_file(dir / "labels", idx_labels(3));
  write_gzip(dir / "images.gz", idx_images(3, 2, 4));
  write_gzip(dir / "labels.gz", idx_labels(3));

  for (const char* suffix : {"", ".gz"}) {
    CAPTURE(suffix);
    Dataset d =
        load_idx(dir / (std::string("images") + suffix), dir / (std::string("labels") + suffix));
    CHECK(d.size() == 3);
    CHECK(d.inputs.shape() == Shape{3, 2, 4});
    CHECK(d.inputs.dtype() == DType::f32);
    CHECK(d.targets.shape() == Shape{3});
    CHECK(d.targets.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2});
    auto pixels = d.inputs.to_vector<float>();
    CHECK(pixels[0] == 0.0f);
    CHECK(pixels[8 + 5] == doctest::Approx(15.0 / 255.0));  // image 1, pixel 5
    CHECK(*std::max_element(pixels.begin(), pixels.end()) <= 1.0f);
    CHECK(contains(d.source, "images"));
  }
}

TEST_CASE("data_test: load_idx errors name the file and what is wrong") {
  TempDir dir;
  write_file(dir / "images", idx_images(3, 2, 4));
  write_file(dir / "labels", idx_labels(3));

  SUBCASE("missing file") {
    auto message = data_error_of([&] { load_idx(dir / "nope", dir / "labels"); });
    CHECK(contains(message, (dir / "nope").string()));
    CHECK(contains(message, "No such file"));
  }
  SUBCASE("bad magic") {
    auto message = data_error_of([&] { load_idx(dir / "labels", dir / "labels"); });
    CHECK(contains(message, (dir / "labels").string()));
    CHECK(contains(message, "bad magic 0x00000801"));
    CHECK(contains(message, "0x00000803"));
  }
  SUBCASE("size that does not match the header") {
    Bytes short_images = idx_images(3, 2, 4);
    short_images.pop_back();
    write_file(dir / "short", short_images);
    auto message = data_error_of([&] { load_idx(dir / "short", dir / "labels"); });
    CHECK(contains(message, (dir / "short").string()));
    CHECK(contains(message, "expected 40 bytes"));
    CHECK(contains(message, "got 39"));
    // The same through gzip: the sizes are of the unpacked stream.
    write_gzip(dir / "short.gz", short_images);
    message = data_error_of([&] { load_idx(dir / "short.gz", dir / "labels"); });
    CHECK(contains(message, "expected 40 bytes (after gunzip), got 39"));
  }
  SUBCASE("image and label counts differ") {
    write_file(dir / "labels2", idx_labels(2));
    auto message = data_error_of([&] { load_idx(dir / "images", dir / "labels2"); });
    CHECK(contains(message, (dir / "images").string()));
    CHECK(contains(message, (dir / "labels2").string()));
    CHECK(contains(message, "3 images"));
    CHECK(contains(message, "2 labels"));
  }
  SUBCASE("truncated gzip") {
    write_gzip(dir / "images.gz", idx_images(50, 8, 8));
    Bytes gz = read_file(dir / "images.gz");
    gz.resize(gz.size() / 2);
    write_file(dir / "cut.gz", gz);
    auto message = data_error_of([&] { load_idx(dir / "cut.gz", dir / "labels"); });
    CHECK(contains(message, (dir / "cut.gz").string()));
    CHECK(contains(message, "truncated gzip"));
  }
}

TEST_CASE("data_test: the real Fashion-MNIST test split") {
  // scripts/setup.sh installs Debian's dataset-fashion-mnist (the default config's data).
  const char* env = std::getenv("TESSERA_FASHION_MNIST_DIR");
  const fs::path dir = env ? fs::path(env) : fs::path("/usr/share/datasets/fashion-mnist");
  Dataset d = load_idx(dir / "t10k-images-idx3-ubyte.gz", dir / "t10k-labels-idx1-ubyte.gz");
  CHECK(d.inputs.shape() == Shape{10000, 28, 28});
  auto labels = d.targets.to_vector<std::int32_t>();
  CHECK(*std::min_element(labels.begin(), labels.end()) == 0);
  CHECK(*std::max_element(labels.begin(), labels.end()) == 9);
}

TEST_CASE("data_test: npy round trip through save_npy and load_npy") {
  TempDir dir;
  Tensor f = Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f}, Shape{2, 3});
  Tensor i = Tensor::from_vector<std::int32_t>({-1, 0, 1, 2147483647}, Shape{4});
  Tensor l = Tensor::from_vector<std::int64_t>({-5, 1LL << 40}, Shape{1, 2, 1});
  Tensor s = Tensor::from_vector<float>({42.0f}, Shape{});
  for (const Tensor& t : {f, i, l, s}) {
    CAPTURE(t.describe());
    save_npy(dir / "t.npy", t);
    Bytes bytes = read_file(dir / "t.npy");
    CHECK((bytes.size() - t.nbytes()) % 64 == 0);  // numpy's header alignment
    Tensor back = load_npy(dir / "t.npy");
    CHECK(back.dtype() == t.dtype());
    CHECK(back.shape() == t.shape());
    CHECK(std::memcmp(back.raw_data(), t.raw_data(), t.nbytes()) == 0);
  }
  // Nothing is left beside the file (the temporary was renamed).
  int files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir / "")) ++files;
  CHECK(files == 1);

  // The header numpy would write: the dict, space-padded so that the data
  // starts at a multiple of 64 bytes, and a newline.
  auto header_of = [&](const fs::path& path) {
    Bytes bytes = read_file(path);
    return std::string(bytes.begin() + 10, bytes.begin() + 10 + (bytes[8] | (bytes[9] << 8)));
  };
  auto padded = [](std::string dict) {
    const std::size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
    return dict + std::string(total - 10 - dict.size() - 1, ' ') + "\n";
  };
  CHECK(header_of(dir / "t.npy") ==
        padded("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"));
  save_npy(dir / "f.npy", f);
  CHECK(header_of(dir / "f.npy") ==
        padded("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  save_npy(dir / "i.npy", i);
  CHECK(header_of(dir / "i.npy") ==
        padded("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }"));
  fs::remove(dir / "f.npy");
  fs::remove(dir / "i.npy");

  CHECK_THROWS_AS(save_npy(dir / "b.npy", Tensor::empty(Shape{2}, DType::bf16)), DataError);
  CHECK_THROWS_AS(save_npy(dir / "no_such_dir" / "x.npy", f), DataError);
}

TEST_CASE("data_test: load_npy converts f64 and u8, and rejects what it cannot read") {
  TempDir dir;
  const double values[] = {0.5, -1.25, 3.0};
  Bytes f64(sizeof values);
  std::memcpy(f64.data(), values, sizeof values);
  write_file(dir / "f64.npy",
             npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", f64));
  Tensor t = load_npy(dir / "f64.npy");
  CHECK(t.dtype() == DType::f32);
  CHECK(t.to_vector<float>() == std::vector<float>{0.5f, -1.25f, 3.0f});

  write_file(dir / "u8.npy",
             npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }",
                       Bytes{0, 7, 200, 255}));
  t = load_npy(dir / "u8.npy");
  CHECK(t.dtype() == DType::i32);
  CHECK(t.shape() == Shape{2, 2});
  CHECK(t.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 7, 200, 255});

  write_file(
      dir / "fortran.npy",
      npy_bytes("{'descr': '|u1', 'fortran_order': True, 'shape': (2, 2), }", Bytes{0, 1, 2, 3}));
  auto message = data_error_of([&] { load_npy(dir / "fortran.npy"); });
  CHECK(contains(message, (dir / "fortran.npy").string()));
  CHECK(contains(message, "fortran_order"));

  write_file(dir / "f2.npy",
             npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", Bytes{0, 0}));
  message = data_error_of([&] { load_npy(dir / "f2.npy"); });
  CHECK(contains(message, "'<f2' is not supported"));

  write_file(
      dir / "short.npy",
      npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", Bytes{1, 0, 0, 0}));
  message = data_error_of([&] { load_npy(dir / "short.npy"); });
  CHECK(contains(message, "expected 8 bytes, got 4"));

  // Numbers float32 cannot hold, and NaN, are refused naming the element.
  const double wide[] = {1.0, 1e300};
  Bytes f64_wide(sizeof wide);
  std::memcpy(f64_wide.data(), wide, sizeof wide);
  write_file(dir / "wide.npy", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", f64_wide));
  CHECK(contains(data_error_of([&] { load_npy(dir / "wide.npy"); }), "element 1 is infinite in float32"));
  const float nan[] = {0.0f, 1.0f, std::numeric_limits<float>::quiet_NaN()};
  Bytes f32_nan(sizeof nan);
  std::memcpy(f32_nan.data(), nan, sizeof nan);
  write_file(dir / "nan.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f32_nan));
  CHECK(contains(data_error_of([&] { load_npy(dir / "nan.npy"); }), "element 2 is NaN"));

  // A damaged header's bytes are echoed escaped, never raw (issue 18).
  write_file(dir / "damaged.npy",
             npy_bytes("{'descr': '<f\xff\x01', 'fortran_order': False, 'shape': (1,), }", Bytes{0, 0, 0, 0}));
  message = data_error_of([&] { load_npy(dir / "damaged.npy"); });
  CHECK(contains(message, "dtype '<f\\xff\\x01' is not supported"));
  CHECK(message.find('\xff') == std::string::npos);

  write_text(dir / "text.npy", "not numpy at all");
  CHECK(contains(data_error_of([&] { load_npy(dir / "text.npy"); }), "not a .npy file"));
  CHECK(contains(data_error_of([&] { load_npy(dir / "missing.npy"); }), "missing.npy"));
}

TEST_CASE("data_test: load_npz reads stored and deflated members") {
  TempDir dir;
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  std::vector<std::int32_t> labels(500);
  std::iota(labels.begin(), labels.end(), 0);
  Tensor y = Tensor::from_vector(labels, Shape{500});
  save_npy(dir / "x.npy", x);
  save_npy(dir / "y.npy", y);
  write_file(dir / "a.npz", make_zip({{"x.npy", read_file(dir / "x.npy"), false},
                                      {"y.npy", read_file(dir / "y.npy"), true}}));

  CHECK(npz_names(dir / "a.npz") == std::vector<std::string>{"x", "y"});
  Tensor x2 = load_npz(dir / "a.npz", "x");
  CHECK(x2.shape() == Shape{3, 2});
  CHECK(x2.to_vector<float>() == x.to_vector<float>());
  Tensor y2 = load_npz(dir / "a.npz", "y.npy");
  CHECK(y2.to_vector<std::int32_t>() == labels);

  auto message = data_error_of([&] { load_npz(dir / "a.npz", "z"); });
  CHECK(contains(message, (dir / "a.npz").string()));
  CHECK(contains(message, "no array 'z'"));
  CHECK(contains(message, "'x', 'y'"));

  // A corrupted deflated member fails its CRC (or the inflate) instead of loading garbage.
  Bytes zip = read_file(dir / "a.npz");
  Bytes x_npy = read_file(dir / "x.npy");
  const std::size_t y_data = 30 + 5 + x_npy.size() + 30 + 5;  // after the second local header
  zip[y_data + 20] ^= 0x5a;
  write_file(dir / "bad.npz", zip);
  message = data_error_of([&] { load_npz(dir / "bad.npz", "y"); });
  CHECK(contains(message, "entry 'y.npy'"));

  // A central directory that claims 4 GiB for a member is refused before anything is allocated.
  for (const bool deflated : {false, true}) {
    Bytes claims = read_file(dir / "a.npz");
    const Bytes central = {0x50, 0x4b, 0x01, 0x02};
    auto header = std::search(claims.begin(), claims.end(), central.begin(), central.end());
    if (deflated) header = std::search(header + 1, claims.end(), central.begin(), central.end());
    REQUIRE(header != claims.end());
    for (int i = 0; i < 4; ++i) header[24 + i] = i == 0 ? 0xf0 : 0xff;  // uncompressed size 0xfffffff0
    write_file(dir / "claims.npz", claims);
    message = data_error_of([&] { load_npz(dir / "claims.npz", deflated ? "y" : "x"); });
    CHECK(contains(message, deflated ? "more than deflate can expand to" : "stored entry with differing sizes"));
  }

  write_text(dir / "not.npz", "hello, this is no zip archive at all");
  CHECK(contains(data_error_of([&] { load_npz(dir / "not.npz", "x"); }), "not a zip archive"));
}

TEST_CASE("data_test: load_csv reads a table and names line and column of a bad cell") {
  TempDir dir;
  write_text(dir / "iris.csv",
             "a, b ,label\r\n"
             "1.5,2,0\r\n"
             "\r\n"
             "-3e2, 4.25 ,2\r\n"
             "5,+6,1\n");
  Dataset d = load_csv(dir / "iris.csv", -1, true);
  CHECK(d.size() == 3);
  CHECK(d.inputs.shape() == Shape{3, 2});
  CHECK(d.inputs.to_vector<float>() == std::vector<float>{1.5f, 2, -300, 4.25f, 5, 6});
  CHECK(d.targets.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 2, 1});

  write_text(dir / "first.csv", "3,0.5,0.25\n1,1,1\n");
  d = load_csv(dir / "first.csv", 0, false);
  CHECK(d.targets.to_vector<std::int32_t>() == std::vector<std::int32_t>{3, 1});
  CHECK(d.inputs.to_vector<float>() == std::vector<float>{0.5f, 0.25f, 1, 1});

  write_text(dir / "bad.csv", "a,b,label\n1,2,0\n3,x7,1\n");
  auto message = data_error_of([&] { load_csv(dir / "bad.csv", 2, true); });
  CHECK(contains(message, (dir / "bad.csv").string() + ":3: column 1 ('b')"));  // counted from 0, as label_column
  CHECK(contains(message, "'x7' is not a number"));

  write_text(dir / "ragged.csv", "1,2,0\n3,4,1\n5,1\n");
  message = data_error_of([&] { load_csv(dir / "ragged.csv", -1, false); });
  CHECK(contains(message, (dir / "ragged.csv").string() + ":3: expected 3 columns, got 2"));

  // Issue 19: a regression table (labels that are not class ids) loads as f32
  // targets; the label column may be named by the header.
  write_text(dir / "label.csv", "x,price,y\n1,0.12533,2\n3,4,5\n");
  d = load_csv(dir / "label.csv", "price", true);
  CHECK(d.targets.dtype() == DType::f32);
  CHECK(d.targets.to_vector<float>() == std::vector<float>{0.12533f, 4});
  CHECK(d.inputs.to_vector<float>() == std::vector<float>{1, 2, 3, 5});
  write_text(dir / "nan.csv", "1,2,nan\n");
  message = data_error_of([&] { load_csv(dir / "nan.csv", -1, false); });
  CHECK(contains(message, ":1: column 2"));
  CHECK(contains(message, "is not a finite number"));

  CHECK(contains(data_error_of([&] { load_csv(dir / "first.csv", 3, false); }), "label column '3' does not exist"));
  // A number is a position, even where the header has a column named so.
  write_text(dir / "numbered.csv", "label,0,1\n2,5,6\n");
  CHECK(load_csv(dir / "numbered.csv", "0", true).targets.to_vector<std::int32_t>() == std::vector<std::int32_t>{2});
  CHECK(contains(data_error_of([&] { load_csv(dir / "label.csv", "cost", true); }),
                 "label column 'cost' does not exist (the table has 3 columns, numbered from 0: 'x', 'price', 'y')"));
  write_text(dir / "header_only.csv", "a,b\n");
  CHECK(
      contains(data_error_of([&] { load_csv(dir / "header_only.csv", 0, true); }), "no data rows"));
}

TEST_CASE("data_test: a CSV weight column becomes the sample weights, not an input") {
  TempDir dir;
  write_text(dir / "w.csv", "a,weight,b,label\n1,0.5,2,0\n3,2,4,1\n");
  Dataset d = load_csv(dir / "w.csv", "label", true, "weight");
  CHECK(d.inputs.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  REQUIRE(d.weights.defined());
  CHECK(d.weights.to_vector<float>() == std::vector<float>{0.5f, 2});
  CHECK(load_csv(dir / "w.csv", "-1", true, "1").weights.to_vector<float>() == std::vector<float>{0.5f, 2});
  CHECK(!load_csv(dir / "w.csv", "-1", true).weights.defined());
  write_text(dir / "negative.csv", "a,weight,label\n1,0.5,0\n3,-2,1\n");
  const std::string message = data_error_of([&] { load_csv(dir / "negative.csv", "label", true, "weight"); });
  CHECK(contains(message, (dir / "negative.csv").string() + ":3: column 1 ('weight')"));
  CHECK(contains(message, "is not a finite number >= 0"));
  CHECK(contains(data_error_of([&] { load_csv(dir / "w.csv", "label", true, "label"); }), "is the label column"));
  CHECK(contains(data_error_of([&] { load_csv(dir / "w.csv", "label", true, "w"); }), "weight column 'w' does not exist"));
  // From a config: weight_column; and validation_split beside data.validation is refused at the key.
  std::ofstream(dir / "run.yaml") << "model: {inputs: [{name: x, shape: [3]}], layers: [{type: Dense, units: 2}]}\n"
                                     "training: {loss: sparse_categorical_crossentropy, validation_split: 0.5}\n"
                                     "data:\n"
                                     "  train: {type: csv, path: w.csv, weight_column: weight}\n"
                                     "  validation: {type: csv, path: w.csv}\n";
  const std::string both = test::error_of<ConfigError>([&] { load_run_config(dir / "run.yaml"); });
  CHECK(contains(both, "run.yaml:2:"));
  CHECK(contains(both, "data.validation is given too"));
  std::ofstream(dir / "one.yaml") << "model: {inputs: [{name: x, shape: [3]}], layers: [{type: Dense, units: 2}]}\n"
                                     "training: {loss: sparse_categorical_crossentropy, validation_split: 0.5}\n"
                                     "data: {train: {type: csv, path: w.csv, weight_column: weight}}\n";
  RunConfig run = load_run_config(dir / "one.yaml");
  CHECK(load_dataset(*run.train_data).weights.to_vector<float>() == std::vector<float>{0.5f, 2});
}

TEST_CASE("data_test: rescale: is a data setting, said by default for IDX, applied to any input type") {
  // Issue 19: IDX images were scaled by 1/255 without a word, and nothing
  // else could be scaled, so a raw float .npy met a model trained on [0, 1].
  TempDir dir;
  std::ofstream(dir / "t.csv") << "a,b,label\n2,4,0\n6,8,1\n";
  const std::string csv = "{type: csv, path: " + (dir / "t.csv").string() + ", label_column: 2";
  auto spec = [](const std::string& text) { return ConfigNode::parse("data: " + text, "run.yaml")["data"]; };
  CHECK(load_dataset(spec(csv + "}")).inputs.to_vector<float>() == std::vector<float>{2, 4, 6, 8});
  CHECK(load_dataset(spec(csv + ", rescale: 1/2}")).inputs.to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  CHECK(load_dataset(spec(csv + ", rescale: 0.25}")).inputs.to_vector<float>() == std::vector<float>{0.5f, 1, 1.5f, 2});
  for (const char* bad : {"0", "-1", "1/0", "x", "1/2/3"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(load_dataset(spec(csv + ", rescale: " + bad + "}")),
                         doctest::Contains("run.yaml:1:"), ConfigError);
  }
  CHECK(input_rescale(spec("{type: idx, images: i, labels: l}")) == doctest::Approx(1.0 / 255));
  CHECK(input_rescale(spec("{type: idx, images: i, labels: l, rescale: 1}")) == 1.0);
  CHECK(input_rescale(spec("{type: npz, path: p}")) == 1.0);
  CHECK(rescale_text(1.0 / 255) == "1/255");
  CHECK(rescale_text(0.3) == "0.3");
  CHECK(rescale_text(0.5) == "0.5");
  // Integers (uint8 images read from .npy) become floats when scaled.
  const Tensor bytes = Tensor::from_vector<std::int32_t>({0, 51, 255}, {3});
  const std::vector<float> scaled = rescaled(bytes, 1.0 / 255).to_vector<float>();
  REQUIRE(scaled.size() == 3);
  CHECK(scaled[0] == 0);
  CHECK(scaled[1] == doctest::Approx(0.2));
  CHECK(scaled[2] == doctest::Approx(1.0));
  CHECK(rescaled(bytes, 1.0).dtype() == DType::i32);
}

TEST_CASE("data_test: text bytes and next-token windows") {
  TempDir dir;
  write_file(dir / "t.txt", Bytes{'a', 'b', 'c', 'd', 'e', 'f', 'g', 200, 255});
  Tensor tokens = load_text_bytes(dir / "t.txt");
  CHECK(tokens.dtype() == DType::i32);
  CHECK(tokens.to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{97, 98, 99, 100, 101, 102, 103, 200, 255});

  // 9 tokens, context 3, stride = context: windows start at 0, 3 (a start at 6
  // would need token 9).
  Dataset d = text_windows(tokens, 3);
  CHECK(d.inputs.shape() == Shape{2, 3});
  CHECK(d.targets.shape() == Shape{2, 3});
  CHECK(d.inputs.to_vector<std::int32_t>() == std::vector<std::int32_t>{97, 98, 99, 100, 101, 102});
  CHECK(d.targets.to_vector<std::int32_t>() ==
        std::vector<std::int32_t>{98, 99, 100, 101, 102, 103});

  d = text_windows(tokens, 4, 2);  // overlapping: starts 0, 2, 4
  CHECK(d.size() == 3);
  auto in = d.inputs.to_vector<std::int32_t>(), out = d.targets.to_vector<std::int32_t>();
  CHECK(std::vector<std::int32_t>(in.begin() + 8, in.end()) ==
        std::vector<std::int32_t>{101, 102, 103, 200});
  CHECK(std::vector<std::int32_t>(out.begin() + 8, out.end()) ==
        std::vector<std::int32_t>{102, 103, 200, 255});

  CHECK(text_windows(tokens, 8).size() == 1);
  CHECK_THROWS_AS(text_windows(tokens, 9), DataError);
  CHECK_THROWS_AS(text_windows(Tensor::from_vector<float>({1, 2}, Shape{2}), 1), DataError);
  write_file(dir / "empty.txt", {});
  CHECK(contains(data_error_of([&] { load_text_bytes(dir / "empty.txt"); }), "is empty"));
}

TEST_CASE("data_test: synthetic datasets are deterministic") {
  Dataset a = synthetic_classification(64, Shape{4, 2}, 5, 7);
  Dataset b = synthetic_classification(64, Shape{4, 2}, 5, 7);
  Dataset c = synthetic_classification(64, Shape{4, 2}, 5, 8);
  CHECK(a.inputs.shape() == Shape{64, 4, 2});
  CHECK(a.targets.shape() == Shape{64});
  CHECK(a.inputs.to_vector<float>() == b.inputs.to_vector<float>());
  CHECK(a.targets.to_vector<std::int32_t>() == b.targets.to_vector<std::int32_t>());
  CHECK(a.inputs.to_vector<float>() != c.inputs.to_vector<float>());
  auto labels = a.targets.to_vector<std::int32_t>();
  CHECK(*std::min_element(labels.begin(), labels.end()) == 0);
  CHECK(*std::max_element(labels.begin(), labels.end()) == 4);

  Dataset r = synthetic_regression(32, Shape{6}, 2, 3, 0.0f);
  CHECK(r.targets.shape() == Shape{32, 2});
  CHECK(r.targets.to_vector<float>() ==
        synthetic_regression(32, Shape{6}, 2, 3).targets.to_vector<float>());
  CHECK_THROWS_AS(synthetic_classification(0, Shape{2}, 3, 1), DataError);
  CHECK_THROWS_AS(synthetic_classification(4, Shape{2}, 1, 1), DataError);
}

TEST_CASE("data_test: batch iterator visits every sample once per epoch") {
  Dataset d = indexed_dataset(10);
  BatchIterator it(d, 4, true, 11, false);
  CHECK(it.batches_per_epoch() == 3);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    it.start_epoch(epoch);
    auto batches = epoch_batches(it);
    REQUIRE(batches.size() == 3);
    CHECK(batches[0].size() == 4);
    CHECK(batches[1].size() == 4);
    CHECK(batches[2].size() == 2);  // the last partial batch
    std::vector<std::int32_t> seen;
    for (const auto& b : batches) seen.insert(seen.end(), b.begin(), b.end());
    std::sort(seen.begin(), seen.end());
    std::vector<std::int32_t> all(10);
    std::iota(all.begin(), all.end(), 0);
    CHECK(seen == all);
    CHECK(it.position() == BatchIterator::Position{epoch, 3});
    Batch after;
    CHECK_FALSE(it.next(after));  // stays at the end
    CHECK_FALSE(after.inputs.defined());
  }

  BatchIterator plain(d, 3, false, 11, false);
  auto batches = epoch_batches(plain);
  CHECK(batches == std::vector<std::vector<std::int32_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}});
}

TEST_CASE("data_test: batch order is a pure function of seed and epoch") {
  Dataset d = indexed_dataset(37);
  auto run = [&](std::uint64_t seed, std::int64_t epoch) {
    BatchIterator it(d, 5, true, seed, false);
    it.start_epoch(epoch);
    return epoch_batches(it);
  };
  CHECK(run(1, 0) == run(1, 0));
  CHECK(run(1, 3) == run(1, 3));
  CHECK(run(1, 0) != run(1, 1));
  CHECK(run(1, 0) != run(2, 0));

  // One iterator going through epochs sees what fresh ones see.
  BatchIterator it(d, 5, true, 1, false);
  auto e0 = epoch_batches(it);
  it.start_epoch(1);
  auto e1 = epoch_batches(it);
  CHECK(e0 == run(1, 0));
  CHECK(e1 == run(1, 1));
  CHECK(epoch_order(37, true, 1, 1) == epoch_order(37, true, 1, 1));
  CHECK(epoch_order(5, false, 1, 4) == std::vector<std::int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("data_test: seek resumes the same sequence") {
  Dataset d = indexed_dataset(23);
  BatchIterator first(d, 4, true, 5, false);
  first.start_epoch(2);
  auto full = epoch_batches(first);
  REQUIRE(full.size() == 6);

  BatchIterator resumed(d, 4, true, 5, false);
  Batch b;
  REQUIRE(resumed.next(b));  // some other position, with a batch in flight
  resumed.seek(2, 4);
  CHECK(resumed.position() == BatchIterator::Position{2, 4});
  auto rest = epoch_batches(resumed);
  CHECK(rest == std::vector<std::vector<std::int32_t>>(full.begin() + 4, full.end()));

  // A position saved mid-epoch and restored in a fresh iterator.
  BatchIterator a(d, 4, true, 5, false);
  a.start_epoch(1);
  REQUIRE(a.next(b));
  REQUIRE(a.next(b));
  auto saved = a.position();
  CHECK(saved == BatchIterator::Position{1, 2});
  auto tail_a = epoch_batches(a);
  BatchIterator c(d, 4, true, 5, false);
  c.seek(saved.epoch, saved.batch);
  CHECK(epoch_batches(c) == tail_a);

  resumed.seek(3, 6);  // the end of an epoch is a valid position
  CHECK_FALSE(resumed.next(b));
  CHECK_THROWS_AS(resumed.seek(3, 7), DataError);
  CHECK_THROWS_AS(resumed.seek(-1, 0), DataError);
}

TEST_CASE("data_test: drop_remainder and the last partial batch") {
  Dataset d = indexed_dataset(10);
  BatchIterator dropping(d, 4, true, 3, true);
  CHECK(dropping.batches_per_epoch() == 2);
  auto batches = epoch_batches(dropping);
  REQUIRE(batches.size() == 2);
  CHECK(batches[0].size() == 4);
  CHECK(batches[1].size() == 4);

  BatchIterator keeping(d, 4, true, 3, false);
  Batch b;
  for (int i = 0; i < 3; ++i) REQUIRE(keeping.next(b));
  CHECK(b.size == 2);
  CHECK(b.inputs.shape() == Shape{2, 3});
  CHECK(b.targets.shape() == Shape{2});

  BatchIterator one(d, 64, false, 0, false);  // a batch larger than the dataset
  REQUIRE(one.next(b));
  CHECK(b.size == 10);
  CHECK_FALSE(one.next(b));

  CHECK(contains(data_error_of([&] { BatchIterator(d, 64, false, 0, true); }),
                 "do not fill one batch"));
  CHECK_THROWS_AS(BatchIterator(d, 0, false, 0, false), DataError);
  Dataset ragged{d.inputs, Tensor::from_vector<std::int32_t>({1, 2}, Shape{2}), "ragged"};
  CHECK(contains(data_error_of([&] { BatchIterator(ragged, 2, false, 0, false); }),
                 "different sample counts"));
}

TEST_CASE("data_test: prefetched batches equal a plain gather and reuse two buffers") {
  Dataset d = synthetic_classification(50, Shape{3, 4}, 4, 9);
  const std::int64_t batch_size = 8;
  BatchIterator it(d, batch_size, true, 21, false);
  Allocator& allocator = allocator_for(Device::cpu());
  std::int64_t allocations_after_two = -1;
  int batches_seen = 0;
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    it.start_epoch(epoch);
    auto order = epoch_order(d.size(), true, 21, epoch);
    Batch b;
    for (std::int64_t k = 0; it.next(b); ++k) {
      if (++batches_seen == 2) allocations_after_two = allocator.stats().allocations;
      const std::int64_t first = k * batch_size;
      const std::int64_t rows = std::min(batch_size, d.size() - first);
      // Compared after the gather (which allocates), as the iterator's own
      // allocations are counted separately below.
      Batch plain =
          gather_batch(d, std::span<const std::int64_t>(order).subspan(
                              static_cast<std::size_t>(first), static_cast<std::size_t>(rows)));
      CHECK(b.size == rows);
      CHECK(b.inputs.shape() == plain.inputs.shape());
      CHECK(b.inputs.to_vector<float>() == plain.inputs.to_vector<float>());
      CHECK(b.targets.to_vector<std::int32_t>() == plain.targets.to_vector<std::int32_t>());
    }
  }
  CHECK(batches_seen == 21);

  // Without the plain gathers in between, the iterator allocates nothing more.
  it.start_epoch(5);
  Batch b;
  REQUIRE(it.next(b));
  REQUIRE(it.next(b));
  const std::int64_t before = allocator.stats().allocations;
  while (it.next(b)) {
  }
  for (std::int64_t epoch = 6; epoch < 9; ++epoch) {
    it.start_epoch(epoch);
    while (it.next(b)) {
    }
  }
  CHECK(allocator.stats().allocations == before);
  CHECK(allocations_after_two > 0);

  // Token windows (i32 inputs and targets) go through the same path.
  std::vector<std::int32_t> text(300);
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<std::int32_t>(i * 7 % 256);
  Dataset windows = text_windows(Tensor::from_vector(text, Shape{300}), 16, 5);
  BatchIterator tokens(windows, 7, true, 2, true);
  auto order = epoch_order(windows.size(), true, 2, 0);
  for (std::int64_t k = 0; tokens.next(b); ++k) {
    Batch plain = gather_batch(
        windows, std::span<const std::int64_t>(order).subspan(static_cast<std::size_t>(k * 7), 7));
    CHECK(b.inputs.to_vector<std::int32_t>() == plain.inputs.to_vector<std::int32_t>());
    CHECK(b.targets.to_vector<std::int32_t>() == plain.targets.to_vector<std::int32_t>());
  }
}

TEST_CASE("data_test: an exception on the worker reaches next()") {
  Dataset d = indexed_dataset(20);
  std::atomic<bool> fail{true};
  std::atomic<int> transformed{0};
  BatchIterator it(d, 4, false, 0, false, [&](Batch& batch) {
    // Batch 2 fails while `fail` is set; others are scaled in place.
    if (fail && batch.targets.to_vector<std::int32_t>()[0] == 8)
      throw DataError("augmentation failed");
    float* x = batch.inputs.data<float>();
    for (std::int64_t i = 0; i < batch.inputs.numel(); ++i) x[i] *= 2.0f;
    ++transformed;
  });
  Batch b;
  REQUIRE(it.next(b));
  CHECK(b.inputs.to_vector<float>()[3] == 200.0f);  // sample 1, scaled
  REQUIRE(it.next(b));
  CHECK_THROWS_WITH_AS(it.next(b), "augmentation failed", DataError);
  CHECK_THROWS_AS(it.next(b), DataError);  // it stays failed
  fail = false;
  it.start_epoch(1);  // resets it
  int batches = 0;
  while (it.next(b)) ++batches;
  CHECK(batches == 5);
}

TEST_CASE("data_test: an iterator shuts down cleanly at any point") {
  Dataset d = synthetic_classification(1000, Shape{16}, 3, 1);
  { BatchIterator it(d, 32, true, 1, false); }  // prefetch possibly in flight
  {
    BatchIterator it(d, 32, true, 1, false);
    Batch b;
    REQUIRE(it.next(b));
  }
  {
    BatchIterator it(d, 32, true, 1, false);
    Batch b;
    while (it.next(b)) {
    }
    it.start_epoch(1);
  }
  CHECK(true);
}

TEST_CASE("data_test: a row window gathers only its rows of each batch") {
  // A process of a job of several trains on rows [size/2, size) of each batch
  // (its devices' share), and on every row of a last batch it cannot split.
  Dataset d = indexed_dataset(22);
  RowWindow second_half = [](std::int64_t size) {
    return size % 2 == 0 ? std::pair<std::int64_t, std::int64_t>{size / 2, size} : std::pair<std::int64_t, std::int64_t>{0, size};
  };
  BatchIterator it(d, 8, true, 3, false, {}, second_half);
  it.start_epoch(1);
  const auto order = epoch_order(22, true, 3, 1);
  Batch b;
  std::vector<std::int64_t> sizes, first_rows, rows;
  for (std::int64_t k = 0; it.next(b); ++k) {
    sizes.push_back(b.size);
    first_rows.push_back(b.first_row);
    rows.push_back(b.rows());
    for (std::int64_t r = 0; r < b.rows(); ++r)
      CHECK(b.targets.data<std::int32_t>()[r] == order[static_cast<std::size_t>(k * 8 + b.first_row + r)]);
  }
  CHECK(sizes == std::vector<std::int64_t>{8, 8, 6});
  CHECK(first_rows == std::vector<std::int64_t>{4, 4, 3});
  CHECK(rows == std::vector<std::int64_t>{4, 4, 3});

  BatchIterator bad(d, 8, false, 0, false, {}, [](std::int64_t size) { return std::pair<std::int64_t, std::int64_t>{0, size + 1}; });
  CHECK_THROWS_WITH_AS(bad.next(b), doctest::Contains("row window 0..9 does not lie in a batch of 8"), DataError);
}
