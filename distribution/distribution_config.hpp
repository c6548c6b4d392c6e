// The `distribution:` section of a run config, read into a Distribution:
//
//   distribution:
//     devices: cpu:8            # cpu:N (N logical CPU devices), cuda:all, cuda:0,1, cuda:0x4 (4 logical devices of GPU 0)
//     mesh: {shape: [2, 4], axis_names: [batch, model]}
//     type: model_parallel      # data_parallel | model_parallel | auto_tp | auto
//     memory_limit: 512MiB      # per device (bytes, or KiB/MiB/GiB): auto chooses within it; any plan over it is an error
//     batch_dim_name: batch     # default: the mesh's first axis
//     layout_map:
//       'dense.*kernel': [null, model]
//       'dense_1/output': [batch, null]   # an activation, as Keras' "<layer path>/output"
//     zero: 1                   # split optimizer state and updates along the batch axis (ZeRO-1)
//     collective_timeout_s: 60  # a device missing from a collective this long is an error
//
// `auto_tp` chooses the layouts itself (distribution/auto_tp.hpp) over the
// axis named `model` (else the last axis other than the batch axis); without a
// mesh it is [1, N] (batch, model). `auto` also picks the mesh shape and the
// strategy (strategies.hpp): the fastest predicted one within memory_limit. Without `devices`, the GPUs when there are some, else as many logical CPU
// devices as the mesh has. `data_parallel` without a mesh is a 1-D mesh named
// `batch` over all the devices. Every error is a ConfigError at the offending
// entry (file:line:column), naming the axis, the sizes or the key.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "distribution/auto_tp.hpp"
#include "distribution/distribution.hpp"
#include "distribution/strategies.hpp"

namespace tessera {

class ConfigNode;

struct DistributionConfig {
  std::unique_ptr<Distribution> distribution;
  std::chrono::milliseconds collective_timeout{60000};
  std::map<std::string, std::string> key_locations;  // layout-map key -> "file:line:column: path"
  std::string map_location;                          // of the layout_map itself
  std::string location;                              // of the section
  std::string auto_tp_axis;  // type auto_tp: the axis to split layers over; the layouts come with the model
  std::optional<AutoTpPlan> auto_tp;  // filled in by make_trainer (engine/run/run_config.hpp)
  bool auto_mesh = false;             // type auto
  std::int64_t memory_limit = 0;      // bytes per device; 0: none
  std::string memory_limit_location;  // of memory_limit, for the error of a plan over it
  std::optional<AutoChoice> auto_choice;  // filled in by make_trainer
  int shared_gpu = -1;  // devices: cuda:IxN: I, whose logical devices the mesh names (make_trainer makes them)
  std::vector<std::string> warnings;  // "file:line:column: path: ..." for the commands to print, as Keras warns
};

// Reads the section. It creates no device: make_trainer (engine/run/run_config.hpp)
// makes the logical CPU devices the mesh names when the run starts.
DistributionConfig parse_distribution(ConfigNode node);
// A layout as a config writes it: one mesh axis name or null per dimension
// ([null, model]); throws ConfigError at the entry for an axis `mesh` lacks
// or one used twice.
TensorLayout parse_layout(const ConfigNode& entry, const DeviceMesh& mesh);

}  // namespace tessera
