// Where `tessera train` saves when the config names no checkpoint folder.
//
// Training keeps what it trained, as Keras' ModelCheckpoint and Lightning's
// default root folder do: a run of configs/fashion_mlp.yaml saves to
// runs/fashion_mlp/1, the next to runs/fashion_mlp/2 (never over an earlier
// run's weights), and runs/fashion_mlp/latest links to the newest run that
// has saved. Relative to the working directory, like every path on a command
// line. A resumed run saves into the folder it resumed from.
#pragma once

#include <filesystem>
#include <string>

#include "distribution/collectives/process_group.hpp"

namespace tessera {

// runs/<config stem>/<n>, made empty: n is one more than the highest number
// there (or the next free one, when another run took it meanwhile). In a job
// of several processes, process 0 chooses and the others take its choice.
std::filesystem::path next_run_folder(const std::string& config_file, ProcessGroup& processes = job_processes());

// Points <run folder>/../latest at `run` (atomically: a link made beside it,
// then renamed over the old one). Only for folders made by next_run_folder.
// Returns why it could not (a real folder named latest, say), else "": a run
// that saved its weights does not fail over a convenience link.
// Process 0 alone makes it.
std::string link_latest_run(const std::filesystem::path& run, ProcessGroup& processes = job_processes());

}  // namespace tessera
