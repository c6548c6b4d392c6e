#include <doctest/doctest.h>

#include <cmath>

#include "backends/device_set.hpp"
#include "backends/registry.hpp"
#include "distribution/distribution_config.hpp"
#include "engine/config/config.hpp"
#include "engine/core/printable.hpp"
#include "engine/core/tensor.hpp"

using namespace tessera;

TEST_CASE("dtype names, sizes and bf16 rounding") {
  CHECK(dtype_size(DType::f32) == 4);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::i64) == 8);
  CHECK(parse_dtype("bf16") == DType::bf16);
  CHECK_THROWS_AS(parse_dtype("f16"), DTypeError);
  CHECK(to_f32(to_bf16(1.0f)) == 1.0f);
  // 1 + 2^-8 lies halfway between two bf16 values; ties round to even (1.0).
  CHECK(to_f32(to_bf16(1.00390625f)) == 1.0f);
  CHECK(to_f32(to_bf16(1.01171875f)) == 1.015625f);  // 1 + 3*2^-8 rounds up to even
  CHECK(std::isnan(to_f32(to_bf16(std::nanf("")))));
}

TEST_CASE("shape arithmetic and broadcasting") {
  Shape s{2, 3, 4};
  CHECK(s.numel() == 24);
  CHECK(s.str() == "[2, 3, 4]");
  CHECK(s.normalize_axis(-1) == 2);
  CHECK_THROWS_AS(s.normalize_axis(3), ShapeError);
  CHECK(contiguous_strides(s) == std::vector<std::int64_t>{12, 4, 1});
  CHECK(*broadcast_shapes({4, 1, 3}, {5, 1}) == Shape{4, 5, 3});
  CHECK_FALSE(broadcast_shapes({2, 3}, {4, 3}).has_value());
  CHECK(Shape{}.numel() == 1);
  CHECK(s.rows() == 6);
  CHECK(Shape{3, 0}.rows() == 3);  // numel / last cannot say
  CHECK(Shape{5}.rows() == 1);
  CHECK(Shape{}.rows() == 1);
  CHECK_THROWS_AS(Shape({2, -1}), ShapeError);
  // Counts past 64 bits are errors, not a wrapped size (a 0-byte buffer for 2^62 floats).
  CHECK_THROWS_WITH_AS(Shape({std::int64_t{1} << 62, 4}).numel(), doctest::Contains("more elements than a 64-bit count"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(Tensor::empty(Shape{std::int64_t{1} << 62}, DType::f32),
                       doctest::Contains("more bytes than a 64-bit count"), ShapeError);
}

TEST_CASE("device parsing and errors") {
  CHECK(Device::parse("cpu:3") == Device::cpu(3));
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("gpu:1") == Device::cuda(1));  // Keras' name for a GPU
  CHECK(Device::parse("cpu") == Device::cpu(0));
  CHECK_THROWS_AS(Device::parse("tpu:0"), DeviceError);
  CHECK_THROWS_AS(Device::parse("cpu:x"), DeviceError);
  CHECK_THROWS_AS(Device::parse("cpu:-1"), DeviceError);
}

TEST_CASE("a device set is a count of CPU devices, a list of GPUs or logical devices of one, and parsing it creates none") {
  set_cpu_device_count(1);
  CHECK(parse_device_set("cpu:3").devices == std::vector<Device>{Device::cpu(0), Device::cpu(1), Device::cpu(2)});
  CHECK(parse_device_set("cpu") == DeviceSet{{Device::cpu(0)}, -1});
  for (const char* bad : {"cpu:0", "cpu:x", "cpu:+2", "cpu:99999", "tpu:4", "cuda:", "cuda:1,,2", "cuda:a", "cuda:0x0",
                          "cuda:0x", "cuda:x4", "cuda:0x65", "cuda:0x04", "cuda:0x2x2", "cuda:0x2,1"})
    CHECK_THROWS_AS(parse_device_set(bad), DeviceError);
  CHECK_THROWS_WITH_AS(parse_device_set("tpu:4"), "'tpu:4' names no device kind: use cpu:N, cuda:all, cuda:0,1 or cuda:0x4",
                       DeviceError);
  CHECK_THROWS_WITH_AS(parse_device_set("cuda:0x0"),
                       "'cuda:0x0' is not cuda:IxN, N logical devices (1 to 64) of GPU I", DeviceError);
  if (cuda_device_count() == 0) {
    CHECK_THROWS_WITH_AS(parse_device_set("cuda:all"), doctest::Contains("asks for GPUs, but"), DeviceError);
    CHECK_THROWS_WITH_AS(parse_device_set("cuda:0x4"), doctest::Contains("'cuda:0x4' asks for logical devices of GPU 0, but"),
                         DeviceError);
    CHECK_THROWS_WITH_AS(parse_device_set("gpu:0x4"), doctest::Contains("'gpu:0x4' asks for logical devices of GPU 0, but"),
                         DeviceError);
    CHECK_THROWS_WITH_AS(set_cuda_logical_devices(0, 4), doctest::Contains("asks for logical devices of GPU 0, but"),
                         DeviceError);
  } else {
    const DeviceSet set = parse_device_set("cuda:0x3");
    CHECK(parse_device_set("gpu:0x3") == set);  // Keras' name for a GPU
    CHECK(set == DeviceSet{{Device::cuda(0), Device::cuda(1), Device::cuda(2)}, 0});
    CHECK(cuda_logical_device_count() == cuda_device_count());  // parsing made none
    use_devices(set.devices, set.shared_gpu);
    CHECK(cuda_logical_device_count() == 3);
    CHECK(cuda_gpu_of(Device::cuda(2)) == 0);
    CHECK(cuda_gpu_shares(Device::cuda(2)) == 3);
    set_cuda_logical_devices(0, 0);  // cuda:i is GPU i again
    CHECK(cuda_logical_device_count() == cuda_device_count());
    CHECK(cuda_gpu_shares(Device::cuda(0)) == 1);
  }
  CHECK_THROWS_AS(set_cuda_logical_devices(0, kMaxCudaLogicalDevices + 1), DeviceError);
  // Neither the set nor a distribution section naming one changes the devices that exist...
  CHECK(cpu_device_count() == 1);
  DistributionConfig config = parse_distribution(ConfigNode::parse("distribution: {devices: cpu:4}")["distribution"]);
  CHECK(config.distribution->mesh().devices().size() == 4);
  CHECK(cpu_device_count() == 1);
  // ...until a run uses them.
  use_devices(config.distribution->mesh().devices());
  CHECK(cpu_device_count() == 4);
  set_cpu_device_count(1);
}

TEST_CASE("asking for a device that does not exist names the devices that do") {
  set_cpu_device_count(2);
  try {
    backend_for(Device::cpu(5));
    FAIL("expected a DeviceError");
  } catch (const DeviceError& e) {
    std::string message = e.what();
    CHECK(message.find("cpu:5") != std::string::npos);
    CHECK(message.find("cpu:1") != std::string::npos);
  }
  try {
    backend_for(Device::cuda(0));
    if (cuda_device_count() == 0) FAIL("expected a DeviceError without a GPU");
  } catch (const DeviceError& e) {
    CHECK(std::string(e.what()).find("cuda:0") != std::string::npos);
  }
  set_cpu_device_count(1);
}

TEST_CASE("tensors share storage and count allocations") {
  Allocator& alloc = allocator_for(Device::cpu(0));
  auto before = alloc.stats();
  {
    Tensor t = Tensor::empty({4, 8}, DType::f32);
    CHECK(alloc.stats().allocations == before.allocations + 1);
    CHECK(alloc.stats().bytes_in_use == before.bytes_in_use + 128);
    Tensor view = t.reshape({32});
    view.data<float>()[5] = 7.0f;
    CHECK(t.data<float>()[5] == 7.0f);
    CHECK(alloc.stats().allocations == before.allocations + 1);  // a view allocates nothing
    CHECK_THROWS_AS(t.reshape({5, 7}), ShapeError);
    CHECK_THROWS_AS(t.data<std::int32_t>(), DTypeError);
    CHECK(t.describe() == "f32[4, 8] on cpu:0");
  }
  CHECK(alloc.stats().bytes_in_use == before.bytes_in_use);
  CHECK(alloc.stats().frees == before.frees + 1);
}

TEST_CASE("views of one buffer at offsets") {
  auto buffer = std::make_shared<Buffer>(allocator_for(Device::cpu(0)), 64);
  Tensor a = Tensor::view(buffer, 0, {4}, DType::f32);
  Tensor b = Tensor::view(buffer, 16, {4}, DType::f32);
  a.data<float>()[0] = 1.0f;
  b.data<float>()[0] = 2.0f;
  CHECK(static_cast<float*>(buffer->data())[4] == 2.0f);
  CHECK_THROWS_AS(Tensor::view(buffer, 40, {8}, DType::f32), ShapeError);
}

TEST_CASE("printable: damaged bytes and terminal controls are escaped, well-formed UTF-8 is kept") {
  CHECK(printable("dense/kernel") == "dense/kernel");
  CHECK(printable("poids \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "poids \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("\x1b[2J\x7f") == "\\x1b[2J\\x7f");  // ESC: a terminal's clear screen
  CHECK(printable("\xc2\x9b" "31m") == "\\xc2\\x9b31m");  // C1's CSI, well-formed UTF-8 but a control
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");          // an overlong '/'
  CHECK(printable("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");  // the same in three bytes
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");  // truncated
  CHECK(printable("\x80x") == "\\x80x");        // a stray continuation byte
  CHECK(printable("a\nb") == "a\\x0ab");
  CHECK(printable_lines("first\nsecond \x1b\n") == "first\nsecond \\x1b\n");
}
