// Errors the API answers with, in the OpenAI shape llama-server and vLLM use:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": 400}}
// `code` is the HTTP status; the context-size error adds n_prompt_tokens and n_ctx as
// llama-server does. Anything a request can get wrong is thrown as ApiError by the request
// parsing and answered by the HTTP layer without disturbing other requests.
//
// Tested through the server tests (tests/server and tests/node/server_api.mjs, every error case).
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace qwick {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string type = "");

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  // Extra fields of the error object (n_prompt_tokens, n_ctx).
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();

  nlohmann::ordered_json body() const;

 private:
  int status_;
  std::string param_, type_;
};

// The error type llama-server gives an HTTP status (400 invalid_request_error, 401
// authentication_error, 404 not_found_error, 500 server_error, 501 not_supported_error, 503
// unavailable_error, ...).
const char* error_type_for_status(int status);

inline ApiError invalid_request(std::string message, std::string param = "") {
  return ApiError(400, std::move(message), std::move(param));
}

// Dumps JSON for the wire: one line, invalid UTF-8 replaced rather than thrown on.
std::string wire_json(const nlohmann::ordered_json& value);

}  // namespace qwick
