// The cost model's calibration, measured once per machine and kept in
// $XDG_CACHE_HOME/tessera/calibration.txt (~/.cache when unset), keyed by the
// CPU model and thread count so that a copied home directory re-measures.
#pragma once

#include "distribution/cost_model.hpp"

namespace tessera {

// The cached calibration, or a fresh probe (saved) when there is none, it is
// for another machine, or `refresh`.
Calibration cached_calibration(bool refresh = false);

}  // namespace tessera
