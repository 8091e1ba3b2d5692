#include "server/request_framing.h"

#include <algorithm>
#include <string>

#include "server/api_error.h"

namespace qwick {

void check_framing(const httplib::Request& req) {
  const size_t lengths = req.get_header_value_count("Content-Length");
  if (lengths == 0) return;
  if (lengths > 1) throw ApiError(400, "the request has more than one Content-Length header");
  if (req.has_header("Transfer-Encoding"))
    throw ApiError(400, "the request has both Content-Length and Transfer-Encoding");
  const std::string value = req.get_header_value("Content-Length");
  // Digits only (no sign, no spaces inside); 18 digits keep it within 64 bits.
  if (value.empty() || value.size() > 18 ||
      !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw ApiError(400, "the request's Content-Length is not a byte count (digits only)");
}

bool announces_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

}  // namespace qwick
