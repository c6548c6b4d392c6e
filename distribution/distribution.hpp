// Distribution: how a model's variables and data are laid out over a device
// mesh, as Keras 3's keras.distribution.DataParallel and ModelParallel.
//
//   DataParallel dp(cpu_devices(8));                       // 1-D mesh "batch"
//   DeviceMesh mesh({2, 4}, {"batch", "model"}, cpu_devices(8));
//   LayoutMap map;
//   map.add("dense.*kernel", TensorLayout({std::nullopt, "model"}));
//   ModelParallel mp(mesh, map, "batch");
//   mp.variable_layout("sequential/dense/kernel", {784, 1024});   // [None, model]
//
// Moving between data and model parallel is an edit of the mesh shape: with a
// model axis of size 1 the layout map splits nothing.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "distribution/layout_map.hpp"
#include "distribution/process_placement.hpp"

namespace tessera {

class Distribution {
 public:
  enum class Kind { data_parallel, model_parallel };

  Kind kind() const { return kind_; }
  const DeviceMesh& mesh() const { return mesh_; }
  const LayoutMap& layout_map() const { return layout_map_; }
  // Gives variable `path` its own layout, ahead of the layout map's keys (a model's `layouts:`).
  void pin_layout(const std::string& path, TensorLayout layout) { layout_map_.pin(path, std::move(layout)); }
  // The mesh axis that splits batches (Keras' batch_dim_name).
  const std::string& batch_dim_name() const { return batch_dim_name_; }

  // Keras' get_variable_layout: the layout-map entry for `path`, validated
  // against `shape` (LayoutError naming the variable, dimension, sizes and
  // axis), or replicated when no key matches (`key` is then empty).
  struct VariableLayout {
    TensorLayout layout;
    std::string key;
  };
  VariableLayout variable_layout(const std::string& path, const Shape& shape) const;
  // Keras' get_data_layout: the first (batch) dimension split along the batch axis.
  TensorLayout data_layout(int rank) const;
  // Keras' get_tensor_layout: the layout of an activation ("<layer path>/output"), if the map has one.
  std::optional<TensorLayout> tensor_layout(const std::string& path, const Shape& shape) const;

  // ZeRO-1 (an extension of Keras' API): split optimizer state and updates
  // along the batch axis; each device updates its rows, then all-gathers.
  void set_zero(bool on) { zero_ = on; }
  bool zero() const { return zero_; }

  // Which of the mesh's devices this process owns in a job of several
  // processes (default: all of them). Throws LayoutError when the processes
  // cannot share the mesh evenly.
  void set_placement(ProcessPlacement placement);
  const ProcessPlacement& placement() const { return placement_; }

  std::string str() const;  // "model_parallel on mesh [2, 4] (batch, model) ..., batch axis 'batch'"

 protected:
  Distribution(Kind kind, DeviceMesh mesh, LayoutMap layout_map, std::string batch_dim_name);

 private:
  Kind kind_;
  DeviceMesh mesh_;
  LayoutMap layout_map_;
  std::string batch_dim_name_;
  bool zero_ = false;
  ProcessPlacement placement_;
};

// Replicates every variable and splits batches along the mesh's first axis
// (a 1-D mesh named "batch" over `devices` when no mesh is given).
class DataParallel : public Distribution {
 public:
  explicit DataParallel(DeviceMesh mesh);
  explicit DataParallel(const std::vector<Device>& devices);
};

// Splits variables (and activations) as the layout map says and batches along
// `batch_dim_name` (default: the mesh's first axis); throws LayoutError when
// the mesh lacks that axis.
class ModelParallel : public Distribution {
 public:
  ModelParallel(DeviceMesh mesh, LayoutMap layout_map, std::string batch_dim_name = "");
};

}  // namespace tessera
