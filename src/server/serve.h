// The life of a server process: bind, serve (503 "Loading model" meanwhile), load the model,
// serve it, and on SIGINT / SIGTERM shut down gracefully (waiting requests fail with 503, the
// running one is cancelled, open streams get their last event). A signal while the model is
// still loading exits at once: nothing is running yet.
//
// Tested by the server tests, which start `qwick serve` and stop it with SIGTERM.
#pragma once

#include <functional>
#include <memory>

#include "server/api_server.h"

namespace qwick {

// What a loader returns: the server's view of the model, and whatever owns what it points to.
struct LoadedModel {
  ServedModel served;
  std::shared_ptr<void> owner;
};

// Returns the process exit code. `load` runs on the calling thread and may throw Error.
int run_server(const ServerOptions& options, const std::function<LoadedModel()>& load);

}  // namespace qwick
