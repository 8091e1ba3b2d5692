#include "server/http_reply.h"

#include <string>

namespace qwick {

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  if (error.status() == 503) res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
  res.set_content(wire_json(error.body()), "application/json");
}

void send_json(httplib::Response& res, const nlohmann::ordered_json& body) {
  res.status = 200;
  res.set_content(wire_json(body), "application/json");
}

}  // namespace qwick
