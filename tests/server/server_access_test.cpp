// The access rules (server/access_policy.h) through the server in process: API keys in every
// accepted form and from a key file, CORS answers and preflights, and the Host check against DNS
// rebinding on a loopback address.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/access_policy.h"
#include "test_server.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;
using test::TestServer;

const std::string kBody = R"({"messages": [{"role": "user", "content": "hi"}]})";

int post(TestServer& server, const httplib::Headers& headers,
         const std::string& path = "/v1/chat/completions") {
  auto r = server.client().Post(path, headers, kBody, "application/json");
  return r ? r->status : -1;
}

TEST(ServerAccess, ApiKeysInEveryAcceptedForm) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "qwick_access_test_keys";
  {
    std::ofstream out(file);
    out << "\n  file-key-1  \n\nfile-key-2\n";
  }
  ServerOptions o;
  o.api_key = "key-a, key-b";
  o.api_key_file = file.string();
  TestServer server(test::ScriptedEngine::Options{}, o);
  for (const char* key : {"key-a", "key-b", "file-key-1", "file-key-2"}) {
    EXPECT_EQ(post(server, {{"Authorization", std::string("Bearer ") + key}}), 200) << key;
    EXPECT_EQ(post(server, {{"Authorization", std::string("bearer ") + key}}), 200) << key;
    EXPECT_EQ(post(server, {{"Authorization", std::string("BEARER  ") + key}}), 200) << key;
    EXPECT_EQ(post(server, {{"x-api-key", key}}), 200) << key;
  }
  EXPECT_EQ(post(server, {}), 401);
  EXPECT_EQ(post(server, {{"Authorization", "Bearer key-c"}}), 401);
  EXPECT_EQ(post(server, {{"Authorization", "Bearer key-a2"}}), 401);
  EXPECT_EQ(post(server, {{"Authorization", "Basic key-a"}}), 401);
  EXPECT_EQ(post(server, {{"x-api-key", "nope"}}), 401);
  // Every keyed route goes through the same check, the public ones answer without a key.
  EXPECT_EQ(post(server, {}, "/tokenize"), 401);
  EXPECT_EQ(server.client().Get("/metrics")->status, 401);
  EXPECT_EQ(server.client().Get("/health")->status, 200);
  EXPECT_EQ(server.client().Get("/v1/models")->status, 200);
  EXPECT_EQ(server.client().Get("/v1/models/scripted")->status, 200);
  auto r = server.client().Post("/v1/chat/completions", kBody, "application/json");
  EXPECT_EQ(ojson::parse(r->body)["error"]["type"], "authentication_error");
  std::filesystem::remove(file);
}

TEST(ServerAccess, AnUnreadableOrEmptyKeyFileIsAnError) {
  EXPECT_THROW(read_api_key_file("/nonexistent/keys"), Error);
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "qwick_access_test_empty";
  std::ofstream(file) << "\n \n";
  EXPECT_THROW(read_api_key_file(file.string()), Error);
  std::filesystem::remove(file);
}

TEST(ServerAccess, NoCorsHeadersUnlessAnOriginIsAllowed) {
  TestServer server;
  auto r = server.client().Get("/health", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST(ServerAccess, CorsAnswersAndPreflights) {
  ServerOptions o;
  o.cors_origins = "https://app.example,https://other.example";
  o.api_key = "k";
  TestServer server(test::ScriptedEngine::Options{}, o);
  const httplib::Headers preflight = {{"Origin", "https://app.example"},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "authorization, content-type"}};
  // A preflight needs no key (browsers send none) and says what may be sent.
  auto r = server.client().Options("/v1/chat/completions", preflight);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_NE(r->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
  // The request itself carries the origin back, errors included.
  r = server.client().Post("/v1/chat/completions",
                           {{"Origin", "https://other.example"}, {"Authorization", "Bearer k"}}, kBody,
                           "application/json");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://other.example");
  r = server.client().Post("/v1/chat/completions", {{"Origin", "https://other.example"}}, kBody,
                           "application/json");
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://other.example");
  // Another origin gets no CORS headers, preflight or not.
  r = server.client().Options("/v1/chat/completions", {{"Origin", "https://evil.example"},
                                                       {"Access-Control-Request-Method", "POST"}});
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Methods"));
  // "*" allows any.
  ServerOptions any;
  any.cors_origins = "*";
  TestServer open(test::ScriptedEngine::Options{}, any);
  r = open.client().Get("/health", {{"Origin", "https://whoever.example"}});
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
}

TEST(ServerAccess, HostIsCheckedOnLoopback) {
  ServerOptions o;
  o.allowed_hosts = "qwick.internal";
  TestServer server(test::ScriptedEngine::Options{}, o);
  for (const char* host : {"localhost", "localhost:8080", "127.0.0.1:1234", "[::1]:80", "QWICK.internal:9"}) {
    auto r = server.client().Get("/health", {{"Host", host}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << host;
  }
  for (const char* host :
       {"attacker.example", "attacker.example:8080", "localhost.attacker.example", "127.0.0.1.nip.io"}) {
    auto r = server.client().Post("/v1/chat/completions", {{"Host", host}}, kBody, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << host;
    EXPECT_NE(ojson::parse(r->body)["error"]["message"].get<std::string>().find("Host"), std::string::npos);
  }
}

TEST(ServerAccess, SplitList) {
  EXPECT_EQ(split_list(" a, b ,,c "), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(split_list("").empty());
}

}  // namespace
}  // namespace qwick
