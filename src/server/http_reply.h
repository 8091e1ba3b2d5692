// Writing JSON answers and errors into an httplib response, the same way for every route.
//
// A 503 (busy, loading, shutting down) carries Retry-After, so clients that honour it (the
// OpenAI SDKs do) wait before retrying instead of hammering the server.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace qwick {

// Seconds a client is told to wait before retrying a 503.
constexpr int kRetryAfterSeconds = 1;

void send_error(httplib::Response& res, const ApiError& error);
void send_json(httplib::Response& res, const nlohmann::ordered_json& body);

}  // namespace qwick
