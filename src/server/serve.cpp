#include "server/serve.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <exception>
#include <thread>

#include "core/error.h"

namespace qwick {

int run_server(const ServerOptions& options, const std::function<LoadedModel()>& load) {
  // Every thread started from here on inherits the blocked signals; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  LoadedModel model;  // declared first: destroyed after the server that uses it
  ApiServer server(options);
  const int port = server.bind();
  std::fprintf(stderr, "qwick serve: listening on http://%s:%d\n", options.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> loaded{false};
  std::thread http([&] { server.listen(); });
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (!loaded.load()) {
      std::fprintf(stderr, "qwick serve: stopped while loading the model\n");
      _exit(128 + sig);
    }
    std::fprintf(stderr, "qwick serve: shutting down\n");
    server.shutdown();
  });

  int status = 0;
  try {
    model = load();
    server.attach(model.served);
    std::fprintf(stderr, "qwick serve: model %s loaded, serving\n", model.served.id.c_str());
    std::fflush(stderr);
    loaded.store(true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    status = 1;
    loaded.store(true);  // nothing to wait for: shut down through the same path
    kill(getpid(), SIGTERM);
  }
  waiter.join();
  http.join();
  return status;
}

}  // namespace qwick
