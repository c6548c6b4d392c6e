#include "backends/cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>

#include "backends/cpu/vector_math.hpp"

namespace tessera {

CpuBackend::CpuBackend(Device device, int threads)
    : Backend(device),
      allocator_(device),
      threads_(threads),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {}

bool CpuBackend::supports(OpKind kind, DType dtype) const {
  switch (kind) {
    case OpKind::fill:
    case OpKind::cast:
    case OpKind::transpose:
    case OpKind::broadcast_to:
    case OpKind::concat:
    case OpKind::slice:
    case OpKind::shard_slice:
    case OpKind::cache_write:
      return true;  // data movement: any element size
    case OpKind::matmul:
    case OpKind::binary:
    case OpKind::attention:  // a reference kernel (attention_op.cpp)
    case OpKind::attention_grad:
    case OpKind::one_hot:
    case OpKind::embedding:  // the table's dtype
      return dtype == DType::f32 || dtype == DType::bf16;
    case OpKind::conv2d:
    case OpKind::conv2d_grad_input:
    case OpKind::conv2d_grad_weight:
    case OpKind::pool2d:
    case OpKind::pool2d_grad:
    case OpKind::unary:
    case OpKind::unary_grad:
    case OpKind::reduce:
    case OpKind::softmax:
    case OpKind::softmax_grad:
    case OpKind::cached_attention:
    case OpKind::layer_norm:
    case OpKind::layer_norm_grad:
    case OpKind::embedding_grad:
    case OpKind::dropout:
    case OpKind::sgd_update:
    case OpKind::adam_update:
    case OpKind::moving_average:
      return dtype == DType::f32;
    default:
      return false;  // leaves, views and collectives run no kernel
  }
}

const CpuBackend::Primitive& CpuBackend::primitive(const std::string& key,
                                                  const std::function<Primitive()>& make) {
  auto& cached = primitives_[threads_];
  auto it = cached.find(key);
  if (it != cached.end()) return it->second;
  KernelScope scope(threads_);  // oneDNN picks its blocking for the threads it will have
  Primitive p = make();
  p.scratchpad = p.desc.scratchpad_desc();
  auto bytes = p.scratchpad.get_size();
  if (bytes > 0 && (!scratchpad_ || scratchpad_->bytes() < bytes))
    scratchpad_ = std::make_shared<Buffer>(allocator_, bytes);
  return cached.emplace(key, std::move(p)).first->second;
}

std::size_t CpuBackend::primitive_count() const {
  auto it = primitives_.find(threads_);
  return it == primitives_.end() ? 0 : it->second.size();
}

PrimitiveArgs::PrimitiveArgs(std::initializer_list<std::pair<int, PrimitiveArg>> args) {
  for (const auto& [id, arg] : args) add(id, arg);
}

void PrimitiveArgs::add(int id, PrimitiveArg arg) {
  if (size_ == args_.size()) throw Error("execute: more than " + std::to_string(args_.size()) + " memory arguments");
  args_[size_++] = {id, arg};
}

namespace {

// The primitive's memory object for argument `id` in layout `desc`, pointed
// at `data`: made on first use (or when the layout differs), else repointed.
dnnl_memory_t bind(const CpuBackend::Primitive& p, int id, const dnnl::memory::desc& desc, void* data,
                   const dnnl::engine& engine) {
  for (auto& b : p.bound)
    if (b.id == id) {
      if (b.desc == desc) {
        b.memory.set_data_handle(data);
      } else {
        b = {id, desc, dnnl::memory(desc, engine, data)};
      }
      return b.memory.get();
    }
  p.bound.push_back({id, desc, dnnl::memory(desc, engine, data)});
  return p.bound.back().memory.get();
}

}  // namespace

void CpuBackend::execute(const Primitive& p, const PrimitiveArgs& args) {
  std::array<dnnl_exec_arg_t, 13> exec{};
  int n = 0;
  for (const auto& [id, arg] : args) exec[static_cast<std::size_t>(n++)] = {id, bind(p, id, *arg.desc, arg.data, engine_)};
  if (p.scratchpad.get_size() > 0)
    exec[static_cast<std::size_t>(n++)] = {DNNL_ARG_SCRATCHPAD,
                                           bind(p, DNNL_ARG_SCRATCHPAD, p.scratchpad, scratchpad_->data(), engine_)};
  KernelScope scope(threads_);
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.primitive.get(), stream_.get(), n, exec.data()),
                          "could not execute a primitive");
  stream_.wait();
}

void CpuBackend::reorder(const std::string& key, const PrimitiveArg& from, const PrimitiveArg& to) {
  const Primitive& p = primitive("reorder " + key, [&] {
    dnnl::reorder::primitive_desc pd(engine_, *from.desc, engine_, *to.desc, default_attr());
    return Primitive{dnnl::reorder(pd), pd};
  });
  execute(p, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

PrimitiveArg CpuBackend::weights_in(const std::string& key, const dnnl::memory::desc& wanted,
                                             const dnnl::memory::desc& user, const Tensor& w) {
  if (wanted == user) return memory(user, w);
  PrimitiveArg blocked = memory(wanted, scratch_buffer(key + " weights", wanted.get_size()).data());
  reorder(key + " weights in", memory(user, w), blocked);
  return blocked;
}

dnnl::primitive_attr CpuBackend::default_attr() const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory::data_type dnnl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::i32: return dnnl::memory::data_type::s32;
    case DType::i64: break;
  }
  throw DTypeError("oneDNN has no " + std::string(dtype_name(dtype)) + " data type");
}

dnnl::memory::dims dnnl_dims(const Shape& shape) {
  if (shape.rank() == 0) return {1};
  return dnnl::memory::dims(shape.dims().begin(), shape.dims().end());
}

dnnl::memory::desc plain_desc(const Shape& shape, DType dtype) {
  auto dims = dnnl_dims(shape);
  dnnl::memory::dims strides(dims.size());
  dnnl::memory::dim stride = 1;
  for (std::size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return dnnl::memory::desc(dims, dnnl_type(dtype), strides);
}

bool onednn_runs_avx2() {
  static const bool avx2 = [] {
    const auto isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx2 || isa == dnnl::cpu_isa::avx2_vnni;
  }();
  return avx2;
}

bool onednn_runs_avx512() {
  static const bool avx512 = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);  // its bits are in every later set's
    return (isa & core) == core && widest_vector_isa() == VectorIsa::avx512;
  }();
  return avx512;
}

std::string cache_key(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + t.shape().str();
}

namespace {

// OpenMP threads are not ours to wrap in a DenormalMode: they persist between
// parallel regions. So the mode is given to the team of this calling thread
// once, and again only when the team grows or the setting changes (new team
// threads inherit the caller's mode, which the KernelScope has set by then).
struct TeamDenormalMode {
  int threads = 1;
  bool flush = false;
};
thread_local TeamDenormalMode t_team;

void give_team_denormal_mode(int threads, bool flush) {
  if (threads <= t_team.threads && flush == t_team.flush) return;
#pragma omp parallel num_threads(threads)
  set_thread_denormal_mode(flush);
  t_team = {std::max(threads, t_team.threads), flush};
}

}  // namespace

KernelScope::KernelScope(int threads) : KernelScope(threads, flush_denormals()) {}

// The setting is read once: the caller and its team agree even if another
// thread changes it meanwhile.
KernelScope::KernelScope(int threads, bool flush) : previous_threads_(omp_get_max_threads()), denormals_(flush) {
  omp_set_num_threads(threads);
  give_team_denormal_mode(threads, flush);
}
KernelScope::~KernelScope() { omp_set_num_threads(previous_threads_); }

}  // namespace tessera
