// An httplib::Server whose clients get a bounded total time to send each request.
//
// cpp-httplib's read timeout applies to each read, so a client that trickles its request head or
// body a byte at a time holds a connection (and the pool thread serving it) for as long as it
// likes. This server runs its connections itself (the library's per-connection hook is
// overridable) over a stream whose reads share one deadline per request: from the request's first
// byte until the server starts answering it. Past the deadline a read fails, so the request is
// dropped (an unfinished head) or refused (an unfinished body) and the connection closes.
// Waiting for the next request of a keep-alive connection is bounded by the keep-alive timeout.
// An answer with `Connection: close` closes the connection (the library only heeds the request's),
// after reading for up to a second what the client still sends, so that it gets the answer; the
// server takes the logger slot for that, so set_logger must not be called on it.
//
// Tested in tests/server/server_slow_client_test.cpp.
#pragma once

#include <httplib.h>

#include <chrono>

namespace qwick {

class BoundedHttpServer : public httplib::Server {
 public:
  BoundedHttpServer();

  // The time a client has to send a request's head and body, from its first byte.
  void set_receive_timeout(std::chrono::milliseconds timeout) { receive_timeout_ = timeout; }
  // cpp-httplib listens with a backlog of 5: in a burst of connections the rest are dropped and
  // come back with the client's SYN retries, a second or more later. Called after binding, this
  // raises the backlog to the system's maximum.
  void raise_backlog();

 private:
  bool process_and_close_socket(socket_t sock) override;

  std::chrono::milliseconds receive_timeout_{30000};
};

}  // namespace qwick
