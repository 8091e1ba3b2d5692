// The server's API surface in process over the scripted engine: fields that would change the
// output but cannot be honoured are refused by name, GET /v1/models/{id}.
#include <gtest/gtest.h>

#include "server/unsupported_fields.h"
#include "test_server.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;
using test::TestServer;

ojson chat_body() {
  return {{"messages", ojson::array({{{"role", "user"}, {"content", "hi"}}})}};
}

TEST(ServerApiRules, OutputChangingFieldsThatAreNotSupportedAreRefusedByName) {
  TestServer server;
  ASSERT_FALSE(unsupported_fields().empty());
  for (const UnsupportedField& f : unsupported_fields()) {
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
      ojson body = chat_body();
      body["prompt"] = "hi";
      body[std::string(f.name)] = f.neutral.empty() ? ojson("root ::= \"x\"") : ojson(2);
      auto r = server.client().Post(path, body.dump(), "application/json");
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400) << f.name << " " << r->body;
      const ojson e = ojson::parse(r->body)["error"];
      EXPECT_EQ(e["param"], f.name);
      EXPECT_NE(e["message"].get<std::string>().find(std::string(f.name)), std::string::npos);
      // The neutral value changes nothing and is accepted.
      if (!f.neutral.empty()) {
        body[std::string(f.name)] = ojson::parse(f.neutral);
        r = server.client().Post(path, body.dump(), "application/json");
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << f.name << " " << r->body;
      }
    }
  }
  // vLLM's constraint fields, by name (qwick takes response_format, json_schema and grammar).
  for (const char* name : {"guided_json", "guided_choice"}) {
    ojson body = chat_body();
    body[name] = name == std::string("guided_choice") ? ojson::array({"a", "b"}) : ojson{{"type", "object"}};
    auto r = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(ojson::parse(r->body)["error"]["param"], name);
  }
}

TEST(ServerApiRules, ModelsRetrieve) {
  TestServer server;
  auto r = server.client().Get("/v1/models/scripted");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const ojson j = ojson::parse(r->body);
  EXPECT_EQ(j["id"], "scripted");
  EXPECT_EQ(j["object"], "model");
  EXPECT_EQ(j["owned_by"], "qwick");
  r = server.client().Get("/v1/models/other");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(ojson::parse(r->body)["error"]["code"], 404);
}

}  // namespace
}  // namespace qwick
