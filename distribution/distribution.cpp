#include "distribution/distribution.hpp"

#include "engine/core/error.hpp"

namespace tessera {

Distribution::Distribution(Kind kind, DeviceMesh mesh, LayoutMap layout_map, std::string batch_dim_name)
    : kind_(kind), mesh_(std::move(mesh)), layout_map_(std::move(layout_map)), batch_dim_name_(std::move(batch_dim_name)) {
  if (batch_dim_name_.empty()) batch_dim_name_ = mesh_.axis_names()[0];
  if (!mesh_.has_axis(batch_dim_name_)) {
    std::string axes;
    for (const auto& a : mesh_.axis_names()) axes += (axes.empty() ? "'" : ", '") + a + "'";
    throw LayoutError("batch_dim_name '" + batch_dim_name_ + "' is not an axis of the mesh (its axes: " + axes + ")");
  }
}

Distribution::VariableLayout Distribution::variable_layout(const std::string& path, const Shape& shape) const {
  auto match = layout_map_.match(path);
  if (!match) return {TensorLayout::replicated(shape.rank()), ""};
  match->layout = match->layout.padded_to(shape.rank());
  try {
    match->layout.validate(path, shape, mesh_);
  } catch (const LayoutError& e) {
    throw LayoutError(std::string(e.what()) + " (layout-map key '" + match->key + "')");
  }
  return {match->layout, match->key};
}

TensorLayout Distribution::data_layout(int rank) const {
  std::vector<std::optional<std::string>> axes(static_cast<std::size_t>(rank));
  if (rank > 0) axes[0] = batch_dim_name_;
  return TensorLayout(std::move(axes));
}

std::optional<TensorLayout> Distribution::tensor_layout(const std::string& path, const Shape& shape) const {
  auto match = layout_map_.match(path);
  if (!match) return std::nullopt;
  const TensorLayout layout = match->layout.padded_to(shape.rank());
  layout.validate(path, shape, mesh_);
  return layout;
}

void Distribution::set_placement(ProcessPlacement placement) {
  placement.check(mesh_.size());
  placement_ = placement;
}

std::string Distribution::str() const {
  return std::string(kind_ == Kind::data_parallel ? "data_parallel" : "model_parallel") + " on " + mesh_.str() +
         ", batch axis '" + batch_dim_name_ + "'" + (zero_ ? ", optimizer state split along it (zero: 1)" : "") +
         (placement_.multi_process() ? ", " + std::to_string(placement_.processes) + " processes" : "");
}

DataParallel::DataParallel(DeviceMesh mesh) : Distribution(Kind::data_parallel, std::move(mesh), {}, "") {}

DataParallel::DataParallel(const std::vector<Device>& devices)
    : DataParallel(DeviceMesh({static_cast<std::int64_t>(devices.size())}, {"batch"}, devices)) {}

ModelParallel::ModelParallel(DeviceMesh mesh, LayoutMap layout_map, std::string batch_dim_name)
    : Distribution(Kind::model_parallel, std::move(mesh), std::move(layout_map), std::move(batch_dim_name)) {}

}  // namespace tessera
