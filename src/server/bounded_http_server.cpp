#include "server/bounded_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds seconds_and_micros(time_t sec, time_t usec) {
  return std::chrono::seconds(sec) +
         std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::microseconds(usec));
}

// Waits until `fd` is ready for `events`; false on timeout or error.
bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p{fd, events, 0};
  const int ms = static_cast<int>(std::clamp<int64_t>(timeout.count(), 0, 1 << 30));
  int n;
  while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR) {
  }
  return n > 0;
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  if (rc != 0) return;
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

// One connection's socket as httplib reads and writes it. Reads are buffered (httplib reads the
// head a byte at a time) and the buffer lives as long as the connection, so pipelined requests
// are kept. While a deadline is set, reads fail once it passes; the first write of a final
// answer clears it.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(int fd, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
      : fd_(fd), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  // Waits up to `idle` for the next request's first byte; false when none comes.
  bool await_request(std::chrono::milliseconds idle, const std::atomic<socket_t>& listening) {
    const auto until = Clock::now() + idle;
    // In slices, so that a server that stops listening lets its idle connections go at once.
    while (buffered() == 0) {
      if (listening == INVALID_SOCKET) return false;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      if (wait_for(fd_, POLLIN, std::min(left, std::chrono::milliseconds(100)))) break;
    }
    return true;
  }
  void set_deadline(Clock::time_point deadline) { deadline_ = deadline; }
  // The next write is an interim answer (100 Continue): the body is still to come.
  void expect_interim_answer() { interim_ = true; }
  // The answer just written ends the connection.
  void close_after_answer() { close_ = true; }
  bool closing() const { return close_; }

  bool is_readable() const override { return buffered() > 0 || wait_for(fd_, POLLIN, read_wait()); }
  bool is_writable() const override { return wait_for(fd_, POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (buffered() == 0) {
      if ((deadline_ && Clock::now() >= *deadline_) || !is_readable()) return -1;
      ssize_t n;
      while ((n = recv(fd_, buffer_.data(), buffer_.size(), 0)) < 0 && errno == EINTR) {
      }
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, buffered());
    std::memcpy(ptr, buffer_.data() + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!std::exchange(interim_, false)) deadline_.reset();
    if (!is_writable()) return -1;
    ssize_t n;
    while ((n = send(fd_, ptr, size, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  size_t buffered() const { return end_ - begin_; }
  // The read timeout, or less where the deadline comes first.
  std::chrono::milliseconds read_wait() const {
    if (!deadline_) return read_timeout_;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ - Clock::now());
    return std::clamp(left, std::chrono::milliseconds(0), read_timeout_);
  }

  int fd_;
  std::chrono::milliseconds read_timeout_, write_timeout_;
  std::optional<Clock::time_point> deadline_;
  bool interim_ = false, close_ = false;
  std::array<char, 4096> buffer_{};
  size_t begin_ = 0, end_ = 0;
};

// After an answer that closes the connection, the client may still be sending the body it was
// refused for. Closing with its bytes unread resets the connection, and a reset can discard the
// answer before the client reads it; so the server stops writing and reads (and drops) what
// comes until the client closes too or a second passes (a lingering close).
void linger(int fd) {
  shutdown(fd, SHUT_WR);
  const auto until = Clock::now() + std::chrono::seconds(1);
  std::array<char, 65536> sink;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0 || !wait_for(fd, POLLIN, left)) break;
    if (recv(fd, sink.data(), sink.size(), 0) <= 0) break;
  }
}

// The connection the calling pool thread serves: the logger runs on that thread, after the answer.
thread_local ConnectionStream* serving = nullptr;

}  // namespace

BoundedHttpServer::BoundedHttpServer() {
  set_logger([](const httplib::Request&, const httplib::Response& res) {
    if (serving && res.get_header_value("Connection") == "close") serving->close_after_answer();
  });
}

void BoundedHttpServer::raise_backlog() {
  // listen() on a listening socket sets its backlog anew.
  ::listen(svr_sock_, SOMAXCONN);
}

bool BoundedHttpServer::process_and_close_socket(socket_t sock) {
  ConnectionStream stream(sock, seconds_and_micros(read_timeout_sec_, read_timeout_usec_),
                          seconds_and_micros(write_timeout_sec_, write_timeout_usec_));
  serving = &stream;
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0; --left) {
    if (!stream.await_request(std::chrono::seconds(keep_alive_timeout_sec_), svr_sock_)) break;
    stream.set_deadline(Clock::now() + receive_timeout_);
    bool closed = false;
    ok = process_request(stream, left == 1, closed, [&stream](httplib::Request& req) {
      if (req.get_header_value("Expect") == "100-continue") stream.expect_interim_answer();
    });
    if (!ok || closed || stream.closing()) break;
  }
  serving = nullptr;
  if (stream.closing()) linger(sock);
  shutdown(sock, SHUT_RDWR);
  close(sock);
  return ok;
}

}  // namespace qwick
