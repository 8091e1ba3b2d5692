// libFuzzer target: arbitrary bytes as the body of an Anthropic Messages request (/v1/messages
// and /v1/messages/count_tokens). Every input must either parse or be refused with
// qwick::ApiError (the server's 4xx); anything else escaping, or a crash, is a bug.
// Seeds: tests/fixtures/agent_requests/*.json.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/anthropic_request.h"
#include "server/api_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qwick::RequestDefaults defaults;
  defaults.vocab_size = 512;
  nlohmann::ordered_json body;
  try {
    body = qwick::parse_body(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const qwick::ApiError&) {
    return 0;
  }
  try {
    qwick::parse_messages_request(body, defaults);
  } catch (const qwick::ApiError&) {
  }
  try {
    qwick::parse_count_tokens_request(body, defaults);
  } catch (const qwick::ApiError&) {
  }
  return 0;
}
