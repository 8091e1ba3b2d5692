#include "server/api_error.h"

namespace qwick {

const char* error_type_for_status(int status) {
  switch (status) {
    case 400:
    case 413:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
    case 405:
      return "not_found_error";
    case 501:
      return "not_supported_error";
    case 503:
      return "unavailable_error";
    default:
      return status < 500 ? "invalid_request_error" : "server_error";
  }
}

ApiError::ApiError(int status, std::string message, std::string param, std::string type)
    : std::runtime_error(std::move(message)),
      status_(status),
      param_(std::move(param)),
      type_(type.empty() ? error_type_for_status(status) : std::move(type)) {}

nlohmann::ordered_json ApiError::body() const {
  nlohmann::ordered_json e = {
      {"message", what()},
      {"type", type_},
      {"param", param_.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param_)},
      {"code", status_}};
  for (const auto& [k, v] : extra.items()) e[k] = v;
  return {{"error", std::move(e)}};
}

std::string wire_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace qwick
