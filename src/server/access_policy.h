// Who may use the server, checked once for every request before any route runs (the HTTP
// server's pre-routing hook), so every endpoint, present and future, gets the same rules:
//
// - Host: when the server listens on a loopback address, a request must name a loopback host
//   (localhost, 127.0.0.1, [::1], any port) or one of --allowed-hosts. A web page on another
//   site cannot then reach the local server by pointing its own domain name at 127.0.0.1 (DNS
//   rebinding): its requests carry that domain as Host. Servers on other addresses are reached
//   under names this one cannot know, so they check no Host unless --allowed-hosts lists some.
// - API keys (--api-key KEY[,KEY...], --api-key-file with one key per line): sent as
//   "Authorization: Bearer KEY" (the scheme in any case) or "x-api-key: KEY" (Anthropic clients).
//   /health and the model list answer without a key, as llama-server's do.
// - CORS (--cors-origin LIST, "*" for any): a browser page from a listed origin may call the
//   server; preflight requests (OPTIONS) are answered here, before the key check (browsers send
//   no credentials on them). Without the option no CORS headers are sent and browsers keep
//   other origins out.
//
// Tested in tests/server/server_access_test.cpp.
#pragma once

#include <httplib.h>

#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"

namespace qwick {

struct AccessOptions {
  std::string listen_host;                 // the address the server is bound to
  std::vector<std::string> api_keys;       // empty: no key needed
  std::vector<std::string> cors_origins;   // "*" allows any origin
  std::vector<std::string> allowed_hosts;  // Host names accepted besides the loopback ones
};

class AccessPolicy {
 public:
  explicit AccessPolicy(AccessOptions options);

  // What the server does with a request before routing it: answers a CORS preflight (true:
  // answered), or leaves it to the routes after adding the CORS headers. Throws ApiError (403 for
  // a Host not allowed, 401 for a missing or wrong key).
  bool screen(const httplib::Request& req, httplib::Response& res) const;

 private:
  void check_host(const httplib::Request& req) const;
  void check_key(const httplib::Request& req) const;
  // The Access-Control-Allow-Origin value for the request's Origin, if it is allowed.
  std::optional<std::string> allowed_origin(const httplib::Request& req) const;

  AccessOptions options_;
  bool check_hosts_;
};

// "a,b , c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& list);
// The keys of an --api-key-file: one a line, surrounding whitespace and empty lines ignored.
// Throws Error when the file cannot be read or holds no key.
std::vector<std::string> read_api_key_file(const std::string& path);

}  // namespace qwick
