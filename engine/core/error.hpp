// Typed errors of the Tessera engine.
//
// The engine never aborts on bad user input: it throws one of these, and the
// message names what a user needs to fix it (the op, the shapes, dtypes or
// devices involved; later the YAML path or the variable path and mesh axis).
// `bin/` maps them to exit codes in one place.
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Operand shapes that an op cannot combine, or a shape that is malformed.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// Operand dtypes that an op cannot combine, or a dtype it does not support.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// Operands on different devices, or a device that does not exist.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// An op, dtype or feature that the backend or build does not provide.
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// A sharding that cannot apply: a layout that does not fit its tensor or mesh,
// or a layout map whose keys are ambiguous for a variable. Messages name the
// variable path, the dimension, the sizes and the mesh axis.
class LayoutError : public Error {
 public:
  using Error::Error;
};

// A device has no memory left for an allocation; the message names the
// device, the bytes asked for and, where the caller knows, the tensor.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// A collective that could not complete: a member missing after the timeout,
// an aborted communicator, or mismatched calls; names the collective, the
// group's mesh axes and the ranks concerned.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

// A graph that is malformed (a value used before it is defined, a cycle, ...).
class GraphError : public Error {
 public:
  using Error::Error;
};

// A run configuration that cannot be used: a YAML syntax error, a missing or
// unknown key, a value of the wrong type, a bad override. The message starts
// with where to look: "configs/mlp.yaml:12:5: model.layers[0].units: ...".
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A data file that is missing or malformed (the message names the file and,
// where it helps, the line and column or the header field), or a dataset that
// cannot be batched as asked.
class DataError : public Error {
 public:
  using Error::Error;
};

// A checkpoint or safetensors file that cannot be written, or that is missing,
// malformed or for another model (the message names the file and, where it
// helps, the tensor or variable path and the shapes that disagree).
class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace tessera
