#include "server/api_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "core/error.h"
#include "runtime/request_queue.h"
#include "server/access_policy.h"
#include "server/anthropic_format.h"
#include "server/api_error.h"
#include "server/bounded_http_server.h"
#include "server/completion_endpoint.h"
#include "server/http_reply.h"
#include "server/messages_endpoint.h"
#include "server/metrics.h"
#include "server/request_framing.h"
#include "server/responses_endpoint.h"
#include "text/utf8.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

AccessOptions access_options(const ServerOptions& o) {
  AccessOptions a;
  a.listen_host = o.host;
  a.api_keys = split_list(o.api_key);
  if (!o.api_key_file.empty())
    for (std::string& k : read_api_key_file(o.api_key_file)) a.api_keys.push_back(std::move(k));
  a.cors_origins = split_list(o.cors_origins);
  a.allowed_hosts = split_list(o.allowed_hosts);
  return a;
}

// Errors take the shape of the API the path belongs to.
void send_error(const httplib::Request& req, httplib::Response& res, const ApiError& e) {
  if (!is_messages_path(req.path)) return send_error(res, e);
  res.status = e.status();
  res.set_content(wire_json(anthropic_error(e)), "application/json");
}

}  // namespace

struct ApiServer::Impl {
  explicit Impl(ServerOptions o) : options(std::move(o)), access(access_options(options)) {}

  ServerOptions options;
  AccessPolicy access;
  BoundedHttpServer http;
  ServerMetrics metrics;
  std::optional<ServedModel> model;
  std::unique_ptr<RequestQueue> queue;
  std::unique_ptr<ConstraintCompiler> constraints;
  std::unique_ptr<ServerContext> context;  // for the endpoints below
  std::unique_ptr<CompletionEndpoint> completions;
  std::unique_ptr<MessagesEndpoint> messages;
  std::unique_ptr<ResponsesEndpoint> responses;
  std::atomic<bool> ready{false}, stopping{false};
  std::atomic<int> open_responses{0};

  void setup();
  using Handler = void (Impl::*)(const httplib::Request&, httplib::Response&);
  httplib::Server::Handler route(Handler handler, bool needs_model);
  // A POST route: the body is read here, and reading stops once it exceeds --max-body-size,
  // whatever its encoding (httplib's own limit misses chunked bodies).
  httplib::Server::HandlerWithContentReader post_route(Handler handler);

  void health(const httplib::Request&, httplib::Response& res);
  void metrics_text(const httplib::Request&, httplib::Response& res);
  void models(const httplib::Request&, httplib::Response& res);
  void model_entry(const httplib::Request& req, httplib::Response& res);
  ojson model_json() const;
  void props(const httplib::Request&, httplib::Response& res);
  void chat(const httplib::Request& req, httplib::Response& res) { completions->handle(req, res, true); }
  void complete(const httplib::Request& req, httplib::Response& res) { completions->handle(req, res, false); }
  void messages_create(const httplib::Request& req, httplib::Response& res) { messages->create(req, res); }
  void messages_count(const httplib::Request& req, httplib::Response& res) {
    messages->count_tokens(req, res);
  }
  void responses_create(const httplib::Request& req, httplib::Response& res) { responses->create(req, res); }
  void responses_get(const httplib::Request& req, httplib::Response& res) { responses->get(req, res); }
  void responses_delete(const httplib::Request& req, httplib::Response& res) { responses->remove(req, res); }
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  void apply_template(const httplib::Request& req, httplib::Response& res);
};

httplib::Server::Handler ApiServer::Impl::route(Handler handler, bool needs_model) {
  return [this, handler, needs_model](const httplib::Request& req, httplib::Response& res) {
    try {
      if (stopping.load()) throw ApiError(503, "the server is shutting down");
      if (needs_model && !ready.load()) throw ApiError(503, "Loading model");
      (this->*handler)(req, res);
    } catch (const ApiError& e) {
      send_error(req, res, e);
    } catch (const ChatTemplateError& e) {
      send_error(req, res,
                 invalid_request(std::string("the chat template rejects the conversation: ") + e.what(),
                                 "messages"));
    } catch (const Error& e) {
      send_error(req, res, invalid_request(e.what()));
    } catch (const std::bad_alloc&) {
      send_error(req, res, ApiError(500, "out of memory"));
    } catch (const std::exception& e) {
      send_error(req, res, ApiError(500, e.what()));
    }
  };
}

httplib::Server::HandlerWithContentReader ApiServer::Impl::post_route(Handler handler) {
  return [this, run = route(handler, true)](const httplib::Request& req, httplib::Response& res,
                                            const httplib::ContentReader& reader) {
    const auto limit = static_cast<size_t>(options.max_body_bytes);
    const ApiError too_large(413,
                             fmt::format("the request body is larger than the limit of {} bytes", limit));
    // The rest of an oversized body is not read: the connection closes after the answer.
    auto refuse = [&] {
      res.set_header("Connection", "close");
      send_error(req, res, too_large);
    };
    if (req.has_header("Content-Length") && req.get_header_value<uint64_t>("Content-Length") > limit)
      return refuse();
    std::string body;
    bool over = false;
    const bool read = reader([&](const char* data, size_t n) {
      over = body.size() + n > limit;
      if (!over) body.append(data, n);
      return !over;
    });
    if (over) return refuse();
    if (!read) {
      // Cut short, or not all received within --receive-timeout: the rest of the stream is not a
      // request.
      res.set_header("Connection", "close");
      return send_error(req, res, invalid_request("the request body could not be read in full"));
    }
    httplib::Request full = req;
    full.body = std::move(body);
    run(full, res);
  };
}

void ApiServer::Impl::setup() {
  const int threads = options.http_threads > 0
                          ? options.http_threads
                          : static_cast<int>(std::min<int64_t>(options.queue_size, 4096)) + 16;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_keep_alive_max_count(100);
  http.set_keep_alive_timeout(options.keep_alive_s);
  http.set_read_timeout(options.timeout_s, 0);
  http.set_write_timeout(options.timeout_s, 0);
  http.set_receive_timeout(std::chrono::milliseconds(static_cast<int64_t>(options.receive_timeout_s * 1000)));
  http.set_payload_max_length(static_cast<size_t>(options.max_body_bytes));

  // Every request, whatever its route, passes the access rules first.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    try {
      check_framing(req);
      if (!access.screen(req, res)) return httplib::Server::HandlerResponse::Unhandled;
    } catch (const ApiError& e) {
      send_error(req, res, e);
    }
    // Answered before the body was read: the connection closes, or the body would be read as the
    // next request.
    if (announces_body(req)) res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib answers itself (no route, body too large, unreadable request) get a JSON body.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                     httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    // A request httplib cannot read leaves the connection at an unknown place in the stream.
    if (res.status == 400) res.set_header("Connection", "close");
    std::string message;
    if (res.status == 404)
      message = "no endpoint " + req.method + " " + req.path;
    else if (res.status == 413)
      message = fmt::format("the request body is larger than the limit of {} bytes", options.max_body_bytes);
    else
      message = fmt::format("the request could not be processed (HTTP {})", res.status);
    send_error(req, res, ApiError(res.status, message));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
    send_error(req, res, ApiError(500, "internal error"));
  });

  for (const char* p : {"/health", "/v1/health"}) http.Get(p, route(&Impl::health, false));
  http.Get("/metrics", route(&Impl::metrics_text, false));
  for (const char* p : {"/v1/models", "/models"}) http.Get(p, route(&Impl::models, true));
  for (const char* p : {"/v1/models/(.+)", "/models/(.+)"}) http.Get(p, route(&Impl::model_entry, true));
  http.Get("/props", route(&Impl::props, true));
  for (const char* p : {"/v1/chat/completions", "/chat/completions"}) http.Post(p, post_route(&Impl::chat));
  for (const char* p : {"/v1/completions", "/completions"}) http.Post(p, post_route(&Impl::complete));
  http.Post("/v1/messages", post_route(&Impl::messages_create));
  http.Post("/v1/messages/count_tokens", post_route(&Impl::messages_count));
  http.Post("/v1/responses", post_route(&Impl::responses_create));
  http.Get("/v1/responses/([^/]+)", route(&Impl::responses_get, true));
  http.Delete("/v1/responses/([^/]+)", route(&Impl::responses_delete, true));
  http.Post("/tokenize", post_route(&Impl::tokenize));
  http.Post("/detokenize", post_route(&Impl::detokenize));
  http.Post("/apply-template", post_route(&Impl::apply_template));
}

void ApiServer::Impl::health(const httplib::Request&, httplib::Response& res) {
  if (!ready.load()) throw ApiError(503, "Loading model");
  send_json(res, {{"status", "ok"}});
}

void ApiServer::Impl::metrics_text(const httplib::Request&, httplib::Response& res) {
  MetricsGauges g;
  if (ready.load()) {
    g.processing = queue->busy() ? 1 : 0;
    g.waiting = static_cast<int64_t>(queue->waiting());
    g.cache = model->engine->cache_stats();
  }
  res.set_content(metrics.render(g), "text/plain; version=0.0.4");
}

ojson ApiServer::Impl::model_json() const {
  return {
      {"id", model->id}, {"object", "model"}, {"created", 0}, {"owned_by", "qwick"}, {"meta", model->meta}};
}

void ApiServer::Impl::models(const httplib::Request&, httplib::Response& res) {
  send_json(res, {{"object", "list"}, {"data", ojson::array({model_json()})}});
}

// GET /v1/models/{id} (the OpenAI clients' models.retrieve); ids may hold slashes.
void ApiServer::Impl::model_entry(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  if (id != model->id)
    throw ApiError(404,
                   fmt::format("the model \"{}\" does not exist (this server serves \"{}\")", id, model->id),
                   "model");
  send_json(res, model_json());
}

void ApiServer::Impl::props(const httplib::Request&, httplib::Response& res) {
  const RequestDefaults& d = model->defaults;
  const SamplingParams& s = d.sampling;
  ojson params = {{"temperature", s.temperature},
                  {"top_k", s.top_k},
                  {"top_p", s.top_p},
                  {"min_p", s.min_p},
                  {"repeat_penalty", s.repetition_penalty},
                  {"repeat_last_n", s.penalty_last_n},
                  {"presence_penalty", s.presence_penalty},
                  {"frequency_penalty", s.frequency_penalty},
                  {"seed", d.seed},
                  {"n_predict", d.max_tokens},
                  {"reasoning_format", d.reasoning_format == ReasoningFormat::kNone ? "none" : "deepseek"},
                  {"chat_template_kwargs", d.chat_template_kwargs},
                  {"cache_prompt", d.cache_prompt}};
  send_json(res,
            {{"default_generation_settings", {{"n_ctx", model->engine->context_size()}, {"params", params}}},
             {"total_slots", 1},
             {"model_alias", model->id},
             {"model_path", model->path},
             {"chat_template", model->chat_template},
             {"modalities", {{"vision", false}, {"audio", false}}},
             {"build_info", std::string("qwick ") + QWICK_VERSION}});
}

void ApiServer::Impl::tokenize(const httplib::Request& req, httplib::Response& res) {
  const ojson body = parse_body(req.body);
  const auto it = body.find("content");
  if (it == body.end() || !it->is_string()) throw invalid_request("content must be a string", "content");
  auto flag = [&](const char* name, bool fallback) {
    const auto f = body.find(name);
    if (f == body.end() || f->is_null()) return fallback;
    if (!f->is_boolean()) throw invalid_request(std::string(name) + " must be a boolean", name);
    return f->get<bool>();
  };
  flag("add_special", false);  // Qwen adds no BOS/EOS: accepted, changes nothing
  const std::vector<int32_t> ids =
      model->tokenizer->encode(it->get<std::string>(), flag("parse_special", true));
  if (!flag("with_pieces", false)) {
    send_json(res, {{"tokens", ids}});
    return;
  }
  ojson tokens = ojson::array();
  for (int32_t id : ids) {
    const std::string_view piece = model->tokenizer->token_bytes(id);
    ojson p =
        is_valid_utf8(piece) ? ojson(piece) : ojson(std::vector<unsigned char>(piece.begin(), piece.end()));
    tokens.push_back({{"id", id}, {"piece", std::move(p)}});
  }
  send_json(res, {{"tokens", std::move(tokens)}});
}

void ApiServer::Impl::detokenize(const httplib::Request& req, httplib::Response& res) {
  const ojson body = parse_body(req.body);
  const auto it = body.find("tokens");
  if (it == body.end() || !it->is_array())
    throw invalid_request("tokens must be an array of token ids", "tokens");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    const ojson& t = (*it)[i];
    const int64_t id = t.is_number_integer() ? t.get<int64_t>() : -1;
    if (id < 0 || id > INT32_MAX || !model->tokenizer->has_token(static_cast<int32_t>(id)))
      throw invalid_request(fmt::format("tokens[{}]: {} is not a token id of this model", i, t.dump()),
                            "tokens");
    ids.push_back(static_cast<int32_t>(id));
  }
  send_json(res, {{"content", utf8_lossy(model->tokenizer->decode(ids))}});
}

void ApiServer::Impl::apply_template(const httplib::Request& req, httplib::Response& res) {
  const ChatTemplateInput in = parse_template_request(parse_body(req.body), model->defaults);
  send_json(res, {{"prompt", render_chat_template(in, model->template_kind)}});
}

ApiServer::ApiServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->setup();
}

ApiServer::~ApiServer() {
  shutdown();
}

int ApiServer::bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    if (port <= 0) fail("cannot listen on {} (any port)", o.host);
    impl_->http.raise_backlog();
    return port;
  }
  if (!impl_->http.bind_to_port(o.host, o.port))
    fail("cannot listen on {}:{} (in use, or not an address here?)", o.host, o.port);
  impl_->http.raise_backlog();
  return o.port;
}

void ApiServer::listen() {
  impl_->http.listen_after_bind();
}

void ApiServer::attach(ServedModel model) {
  Impl& i = *impl_;
  i.model.emplace(std::move(model));
  i.queue = std::make_unique<RequestQueue>(*i.model->engine, static_cast<size_t>(i.options.queue_size));
  i.constraints = std::make_unique<ConstraintCompiler>(*i.model->tokenizer, i.model->engine->vocab_size());
  i.context = std::make_unique<ServerContext>(
      ServerContext{*i.model, *i.queue, i.metrics, i.options, i.open_responses, *i.constraints});
  i.completions = std::make_unique<CompletionEndpoint>(*i.context);
  i.messages = std::make_unique<MessagesEndpoint>(*i.context);
  i.responses = std::make_unique<ResponsesEndpoint>(*i.context);
  i.ready.store(true);
}

void ApiServer::shutdown() {
  Impl& i = *impl_;
  if (i.stopping.exchange(true)) return;
  if (i.queue) i.queue->shutdown();
  // Let open responses write their last event before the sockets close.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (i.open_responses.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  i.http.stop();
}

}  // namespace qwick
