#include "server/responses_endpoint.h"

#include "server/responses_format.h"
#include "server/responses_request.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

ApiError not_found(const std::string& id) {
  return ApiError(404, "no stored response with id \"" + id + "\" (unknown, expired or deleted)");
}

}  // namespace

ResponsesEndpoint::ResponsesEndpoint(ServerContext ctx)
    : ctx_(ctx),
      store_(static_cast<size_t>(ctx.options.responses_store_size),
             std::chrono::seconds(ctx.options.responses_store_age_s)) {}

void ResponsesEndpoint::create(const httplib::Request& req, httplib::Response& res) {
  const ojson body = parse_body(req.body);
  ojson previous;
  const std::string previous_id = previous_response_id(body);
  if (!previous_id.empty()) {
    auto entry = store_.get(previous_id);
    if (!entry)
      throw invalid_request("previous_response_id \"" + previous_id +
                                "\" is not a stored response (unknown, expired or deleted)",
                            "previous_response_id");
    previous = std::move(entry->conversation);
  }
  ResponsesRequest r = parse_responses_request(body, ctx_.model.defaults, previous);
  ChatSubmission s = submit_chat(ctx_, r.chat, "input");
  ResponsesWriter::Completion on_complete;
  if (r.store)
    on_complete = [this, history = std::move(r.history)](const ojson& response, ojson message) mutable {
      history.push_back(std::move(message));
      store_.put(response["id"].get<std::string>(), {response, std::move(history), {}});
    };
  auto writer = std::make_shared<ResponsesWriter>(ctx_.model.id, std::move(r.echo), std::move(on_complete));
  if (r.chat.stream)
    send_stream(ctx_, std::move(s.task), std::move(writer), res);
  else
    send_whole(ctx_, std::move(s.task), std::move(writer), res);
}

void ResponsesEndpoint::get(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  const auto entry = store_.get(id);
  if (!entry) throw not_found(id);
  res.set_content(wire_json(entry->response), "application/json");
}

void ResponsesEndpoint::remove(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  if (!store_.erase(id)) throw not_found(id);
  res.set_content(wire_json({{"id", id}, {"object", "response"}, {"deleted", true}}), "application/json");
}

}  // namespace qwick
