#include "server/access_policy.h"

#include <algorithm>
#include <cctype>
#include <fstream>

#include "core/error.h"

namespace qwick {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// 127.x.y.z written as four decimal numbers (not a name that starts like one: 127.0.0.1.nip.io).
bool is_ipv4_loopback(const std::string& h) {
  if (!h.starts_with("127.")) return false;
  int dots = 0;
  for (char c : h) {
    if (c == '.')
      ++dots;
    else if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  }
  return dots == 3 && !h.ends_with(".") && h.find("..") == std::string::npos;
}

bool is_loopback(const std::string& host) {
  const std::string h = lower(host);
  return h == "localhost" || h == "::1" || h == "[::1]" || is_ipv4_loopback(h);
}

// The host name of a Host header: "[::1]:8080" -> "[::1]", "example.com:80" -> "example.com".
std::string host_name(const std::string& header) {
  const std::string h = lower(trim(header));
  if (h.starts_with("[")) return h.substr(0, h.find(']') + 1);
  return h.substr(0, h.find(':'));
}

// Compares without stopping at the first difference, so the time taken says nothing of the key.
bool same_key(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Endpoints that answer without an API key (as llama-server's; a model's own entry as the list).
bool is_public(const std::string& path) {
  return path == "/health" || path == "/v1/health" || path == "/models" || path == "/v1/models" ||
         path.starts_with("/models/") || path.starts_with("/v1/models/");
}

}  // namespace

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    if (std::string item = trim(list.substr(start, end - start)); !item.empty())
      out.push_back(std::move(item));
    start = end + 1;
  }
  return out;
}

std::vector<std::string> read_api_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--api-key-file: cannot read {}", path);
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);)
    if (std::string key = trim(line); !key.empty()) keys.push_back(std::move(key));
  if (keys.empty()) fail("--api-key-file: {} holds no key", path);
  return keys;
}

AccessPolicy::AccessPolicy(AccessOptions options)
    : options_(std::move(options)),
      check_hosts_(is_loopback(options_.listen_host) || !options_.allowed_hosts.empty()) {
  for (std::string& h : options_.allowed_hosts) h = lower(h);
}

bool AccessPolicy::screen(const httplib::Request& req, httplib::Response& res) const {
  check_host(req);
  const std::optional<std::string> origin = allowed_origin(req);
  if (origin) {
    res.set_header("Access-Control-Allow-Origin", *origin);
    res.set_header("Vary", "Origin");
  }
  if (req.method == "OPTIONS" && req.has_header("Access-Control-Request-Method")) {
    // A preflight: allowed origins learn what they may send; others get no CORS headers, which
    // browsers take as a refusal.
    res.status = 204;
    if (origin) {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers",
                     asked.empty() ? "Authorization, Content-Type, X-Api-Key" : asked);
      res.set_header("Access-Control-Max-Age", "600");
    }
    return true;
  }
  check_key(req);
  return false;
}

void AccessPolicy::check_host(const httplib::Request& req) const {
  if (!check_hosts_ || !req.has_header("Host")) return;
  const std::string name = host_name(req.get_header_value("Host"));
  if (is_loopback(name) && is_loopback(options_.listen_host)) return;
  if (std::find(options_.allowed_hosts.begin(), options_.allowed_hosts.end(), name) !=
      options_.allowed_hosts.end())
    return;
  throw ApiError(
      403, "the Host \"" + name + "\" is not allowed (the server accepts the hosts of --allowed-hosts)");
}

void AccessPolicy::check_key(const httplib::Request& req) const {
  if (options_.api_keys.empty() || is_public(req.path)) return;
  std::string key;
  if (const std::string auth = trim(req.get_header_value("Authorization")); !auth.empty()) {
    const size_t space = auth.find(' ');
    if (space == std::string::npos || lower(auth.substr(0, space)) != "bearer")
      throw ApiError(401, "the Authorization header must be \"Bearer <key>\"");
    key = trim(auth.substr(space + 1));
  } else {
    key = trim(req.get_header_value("x-api-key"));
  }
  if (key.empty())
    throw ApiError(401, "missing API key (send Authorization: Bearer <key>, or x-api-key: <key>)");
  bool known = false;
  for (const std::string& k : options_.api_keys) known |= same_key(key, k);
  if (!known) throw ApiError(401, "invalid API key");
}

std::optional<std::string> AccessPolicy::allowed_origin(const httplib::Request& req) const {
  if (options_.cors_origins.empty() || !req.has_header("Origin")) return std::nullopt;
  const std::string origin = req.get_header_value("Origin");
  for (const std::string& o : options_.cors_origins) {
    if (o == "*") return "*";
    if (o == origin) return origin;
  }
  return std::nullopt;
}

}  // namespace qwick
