#include "server/completion_endpoint.h"

#include <ctime>

#include "server/api_error.h"
#include "server/openai_format.h"
#include "server/openai_request.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

// The OpenAI chat.completion(.chunk) / text_completion answer of a task.
class CompletionWriter : public ChatWriter {
 public:
  CompletionWriter(const Tokenizer& tokenizer, ResponseMeta meta, bool include_usage, bool logprobs)
      : acc_(tokenizer), meta_(std::move(meta)), include_usage_(include_usage), logprobs_(logprobs) {}

  std::string stream_start() override {
    return meta_.chat ? sse_event(stream_chunk(meta_, {{"role", "assistant"}, {"content", nullptr}}, nullptr,
                                               nullptr))
                      : "";
  }

  bool add(const std::vector<ResponseEvent>& events, std::string* out) override {
    for (const ResponseEvent& e : events) {
      switch (e.kind) {
        case ResponseEvent::Kind::kPrefill:
          break;
        case ResponseEvent::Kind::kOutput: {
          std::vector<ojson> deltas = acc_.add(e, meta_);
          if (out == nullptr) break;
          carried_.insert(carried_.end(), e.tokens.begin(), e.tokens.end());
          if (deltas.empty()) break;
          // Streamed log-probabilities ride on the chunk that carries their tokens' text.
          ojson lp = logprobs_ ? acc_.logprobs(carried_, meta_.chat) : ojson();
          carried_.clear();
          for (ojson& d : deltas) {
            *out += sse_event(stream_chunk(meta_, std::move(d), nullptr, lp));
            lp = nullptr;
          }
          break;
        }
        case ResponseEvent::Kind::kFinished:
          stats_ = e.stats;
          finish_reason_ = e.finish_reason;
          if (out != nullptr) {
            const ojson lp = logprobs_ && !carried_.empty() ? acc_.logprobs(carried_, meta_.chat) : ojson();
            ojson last =
                stream_chunk(meta_, meta_.chat ? ojson::object() : ojson{{"text", ""}}, e.finish_reason, lp);
            if (include_usage_) {
              *out += sse_event(last);
              last = usage_chunk(meta_, e.stats);
            }
            last["timings"] = timings_json(e.stats);
            *out += sse_event(last);
            *out += "data: [DONE]\n\n";
          }
          return true;
        case ResponseEvent::Kind::kFailed:
          error_ = std::make_unique<ApiError>(generation_failure(e));
          if (out != nullptr) *out += sse_event(error_->body());
          return true;
      }
    }
    return false;
  }

  int status() const override { return error_ ? error_->status() : 200; }
  std::string body() override {
    return wire_json(error_ ? error_->body()
                            : whole_response(meta_, acc_, finish_reason_, stats_, logprobs_));
  }
  std::string label() const override { return (meta_.chat ? "chat " : "completion ") + meta_.id; }

 private:
  ResponseAccumulator acc_;
  ResponseMeta meta_;
  bool include_usage_, logprobs_;
  std::vector<GeneratedToken> carried_;  // tokens whose log-probabilities wait for a chunk
  CompletionStats stats_;
  std::string finish_reason_;
  std::unique_ptr<ApiError> error_;
};

}  // namespace

void CompletionEndpoint::handle(const httplib::Request& req, httplib::Response& res, bool chat) {
  const ojson body = parse_body(req.body);
  const ServedModel& model = ctx_.model;
  const CompletionRequest r =
      chat ? parse_chat_request(body, model.defaults) : parse_completion_request(body, model.defaults);
  ChatSubmission s;
  if (chat) {
    s = submit_chat(ctx_, r, "messages");
  } else {
    CompletionJob job;
    if (r.prompt_ids.empty())  // tokenized up to the context size, which already refuses it
      model.tokenizer->encode(r.prompt_text, true, job.prompt,
                              static_cast<size_t>(model.engine->context_size()));
    else
      job.prompt = r.prompt_ids;
    job.sampling = r.sampling;
    job.max_tokens = r.max_tokens;
    job.top_logprobs = r.logprobs ? r.top_logprobs : -1;
    job.reuse = r.cache_prompt;
    if (r.constraint) job.constraint = ctx_.constraints.make(*r.constraint, model.stop_ids, -1);
    ResponseOptions ro;
    ro.chat = false;
    ro.stop = r.stop;
    ro.logprobs = r.logprobs;
    s = submit_job(ctx_, std::move(job), std::move(ro), "prompt");
  }
  ResponseMeta meta{random_id(chat ? "chatcmpl-" : "cmpl-"),
                    static_cast<int64_t>(std::time(nullptr)),
                    model.id,
                    std::string("qwick-") + QWICK_VERSION,
                    chat,
                    ctx_.options.reasoning_field};
  auto writer =
      std::make_shared<CompletionWriter>(*model.tokenizer, std::move(meta), r.include_usage, r.logprobs);
  if (r.stream)
    send_stream(ctx_, std::move(s.task), std::move(writer), res);
  else
    send_whole(ctx_, std::move(s.task), std::move(writer), res);
}

}  // namespace qwick
