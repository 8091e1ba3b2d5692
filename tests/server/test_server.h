// An ApiServer in the test process over the scripted engine, on a free port of 127.0.0.1, with
// the synthetic tokenizer of `qwick make-model` (vocabulary 512). Shared by the server tests.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "model/synthetic_model.h"
#include "scripted_engine.h"
#include "server/api_server.h"
#include "text/output_parser.h"
#include "text/stream_decoder.h"
#include "text/synthetic_tokenizer.h"

namespace qwick::test {

constexpr int64_t kVocab = 512;

// JSON string literal as the server writes it (non-ASCII as is), written out here by hand.
inline std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20)
          out += fmt::format("\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

inline const Tokenizer& tokenizer() {
  static const Tokenizer t =
      Tokenizer::from_json_text(synthetic_tokenizer_json(special_token_base(kVocab)), "synthetic tokenizer");
  return t;
}

// The parser's deltas for a scripted reply, fed token by token as the server feeds them: what a
// stream is expected to carry (thinking on: the output starts in the reasoning).
inline std::vector<OutputDelta> script_deltas(const std::string& script,
                                              const nlohmann::ordered_json& tools) {
  OutputParser parser({true, tools, true, !tools.empty()});
  StreamDecoder decoder(tokenizer());
  std::vector<OutputDelta> deltas;
  for (int32_t id : tokenizer().encode(script, true)) parser.feed(decoder.push(id), deltas);
  parser.feed(decoder.flush(), deltas);
  parser.finish(deltas);
  return deltas;
}

class TestServer {
 public:
  explicit TestServer(ScriptedEngine::Options engine_options = {}, ServerOptions options = {})
      : TestServer(std::make_unique<ScriptedEngine>(tokenizer(), kVocab, engine_options), options) {}
  TestServer(std::unique_ptr<CompletionEngine> engine, ServerOptions options) : engine_(std::move(engine)) {
    options.host = "127.0.0.1";
    options.port = 0;
    options.log_requests = false;
    server_ = std::make_unique<ApiServer>(options);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->listen(); });
    ServedModel m;
    m.id = "scripted";
    m.path = "/nowhere";
    m.tokenizer = &tokenizer();
    m.engine = engine_.get();
    m.stop_ids = {*tokenizer().added_token_id("<|im_end|>")};
    m.defaults.vocab_size = kVocab;
    m.defaults.sampling.temperature = 0;
    server_->attach(m);
  }
  ~TestServer() {
    server_->shutdown();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20, 0);
    return c;
  }
  ApiServer& server() { return *server_; }
  int port() const { return port_; }
  // The scripted engine (for a server made with one).
  ScriptedEngine& engine() { return dynamic_cast<ScriptedEngine&>(*engine_); }

 private:
  std::unique_ptr<CompletionEngine> engine_;
  std::unique_ptr<ApiServer> server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace qwick::test
