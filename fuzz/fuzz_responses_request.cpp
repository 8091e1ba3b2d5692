// libFuzzer target: arbitrary bytes as the body of an OpenAI Responses request (/v1/responses),
// alone and continuing a stored conversation (one with a function call, so outputs for it are
// valid). Every input must either parse or be refused with qwick::ApiError (the server's 4xx);
// anything else escaping, or a crash, is a bug. Seeds: tests/fixtures/agent_requests/*.json.
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/api_error.h"
#include "server/responses_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ojson = nlohmann::ordered_json;
  static const ojson previous = ojson::parse(R"([{"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
     "function": {"name": "f", "arguments": {"a": 1}}}]}])");
  qwick::RequestDefaults defaults;
  defaults.vocab_size = 512;
  ojson body;
  try {
    body = qwick::parse_body(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const qwick::ApiError&) {
    return 0;
  }
  for (const ojson& p : {ojson(), previous}) {
    try {
      qwick::parse_responses_request(body, defaults, p);
    } catch (const qwick::ApiError&) {
    }
  }
  return 0;
}
