#include "server/completion_endpoint.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "server/api_error.h"
#include "server/http_reply.h"
#include "server/openai_format.h"
#include "server/openai_request.h"
#include "text/chat_prompt.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

ApiError failure(const ResponseEvent& e) {
  return e.shutting_down ? ApiError(503, "the server is shutting down")
                         : ApiError(500, "generation failed: " + e.error);
}

}  // namespace

struct CompletionEndpoint::Pending {
  explicit Pending(const Tokenizer& tokenizer) : acc(tokenizer) {}
  std::shared_ptr<ResponseTask> task;
  ResponseAccumulator acc;
  ResponseMeta meta;
  bool include_usage = false, logprobs = false;
  bool started = false;
  int prefill_events = 0;
  std::vector<GeneratedToken> carried;  // tokens whose log-probabilities wait for a chunk
  Clock::time_point last_write = Clock::now();
  // A whole response, once complete.
  bool done = false;
  CompletionStats stats;
  std::string finish_reason;
  std::unique_ptr<ApiError> error;
};

CompletionEndpoint::CompletionEndpoint(const ServedModel& model, RequestQueue& queue, ServerMetrics& metrics,
                                       const ServerOptions& options, std::atomic<int>& open_responses)
    : model_(model),
      queue_(queue),
      metrics_(metrics),
      options_(options),
      open_responses_(open_responses),
      constraints_(*model.tokenizer, model.engine->vocab_size()) {}

void CompletionEndpoint::handle(const httplib::Request& req, httplib::Response& res, bool chat) {
  const ojson body = parse_body(req.body);
  const CompletionRequest r =
      chat ? parse_chat_request(body, model_.defaults) : parse_completion_request(body, model_.defaults);
  const Tokenizer& tokenizer = *model_.tokenizer;
  // A prompt of n_ctx tokens or more is refused: tokenizing stops there (a huge body would
  // otherwise be tokenized in full just to be refused).
  const int64_t n_ctx = model_.engine->context_size();
  const auto token_limit = static_cast<size_t>(n_ctx);

  CompletionJob job;
  ResponseOptions ro;
  ro.chat = chat;
  ro.stop = r.stop;
  ro.logprobs = r.logprobs;
  ro.parallel_tool_calls = r.parallel_tool_calls;
  ro.special = options_.special;
  if (chat) {
    ChatPrompt prompt = build_chat_prompt(r.conversation, model_.template_kind, tokenizer, r.cache_prompt,
                                          options_.special_in_messages, token_limit);
    job.prompt = std::move(prompt.tokens);
    ro.parser.starts_in_reasoning = prompt.text.ends_with("<think>\n");
    ro.parser.tools = r.conversation.tools.is_array() ? r.conversation.tools : ojson::array();
    ro.parser.reasoning = r.reasoning_format == ReasoningFormat::kParsed;
    ro.parser.tool_calls = r.tool_calls;
    if (prompt.history_tokens > 0) job.snapshot_at.push_back(prompt.history_tokens);
  } else {
    if (r.prompt_ids.empty())
      tokenizer.encode(r.prompt_text, true, job.prompt, token_limit);
    else
      job.prompt = r.prompt_ids;
  }
  const auto n_prompt = static_cast<int64_t>(job.prompt.size());
  if (n_prompt == 0) throw invalid_request("the prompt is empty", chat ? "messages" : "prompt");
  if (n_prompt >= n_ctx) {
    ApiError e(
        400,
        fmt::format("the request exceeds the available context size: {} prompt tokens, the context holds {}",
                    n_prompt > n_ctx ? fmt::format("more than {}", n_ctx) : std::to_string(n_prompt), n_ctx),
        "", "exceed_context_size_error");
    e.extra = {{"n_prompt_tokens", n_prompt}, {"n_ctx", n_ctx}};  // (counted up to where tokenizing stopped)
    throw e;
  }
  job.sampling = r.sampling;
  job.max_tokens = r.max_tokens;
  job.stop_ids = model_.stop_ids;
  job.top_logprobs = r.logprobs ? r.top_logprobs : -1;
  job.reuse = r.cache_prompt;
  if (r.constraint) {
    // After a reasoning block the prompt opened, the constraint starts at its end: thinking is free.
    int32_t start_after = -1;
    if (chat && ro.parser.starts_in_reasoning)
      start_after = tokenizer.added_token_id("</think>").value_or(-1);
    job.constraint = constraints_.make(*r.constraint, job.stop_ids, start_after);
  }

  auto p = std::make_shared<Pending>(tokenizer);
  p->task = std::make_shared<ResponseTask>(tokenizer, std::move(ro), metrics_);
  p->task->job = std::move(job);
  p->meta = {random_id(chat ? "chatcmpl-" : "cmpl-"),
             static_cast<int64_t>(std::time(nullptr)),
             model_.id,
             std::string("qwick-") + QWICK_VERSION,
             chat,
             options_.reasoning_field};
  p->include_usage = r.include_usage;
  p->logprobs = r.logprobs;
  if (!queue_.submit(p->task)) {
    metrics_.record_rejected();
    throw ApiError(503, fmt::format("the server is busy ({} requests are waiting already); retry later",
                                    queue_.capacity()));
  }
  if (r.stream)
    stream(p, res);
  else
    whole(p, res);
}

// --- streamed ------------------------------------------------------------------------------------

void CompletionEndpoint::stream(const std::shared_ptr<Pending>& p, httplib::Response& res) {
  ++open_responses_;
  const auto ping =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.ping_interval_s));
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, p, ping](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!p->started) {
          p->started = true;
          if (p->meta.chat)
            out += sse_event(
                stream_chunk(p->meta, {{"role", "assistant"}, {"content", nullptr}}, nullptr, nullptr));
        }
        std::vector<ResponseEvent> events;
        bool complete = false;
        if (p->task->wait(events, ping))
          complete = stream_events(*p, events, out);
        else if (out.empty())
          out = ": ping\n\n";  // an SSE comment: clients skip it, a gone client fails the write
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          p->task->cancel();
          return false;
        }
        if (complete) sink.done();
        return true;
      },
      [this, p](bool) {
        p->task->cancel();
        --open_responses_;
      });
}

bool CompletionEndpoint::stream_events(Pending& p, std::vector<ResponseEvent>& events, std::string& out) {
  const bool chat = p.meta.chat;
  for (ResponseEvent& e : events) {
    switch (e.kind) {
      case ResponseEvent::Kind::kPrefill:
        // Between chunks of a long prefill: a comment, so a client that went away is noticed.
        if (p.prefill_events++ > 0 && e.done < e.total)
          out += fmt::format(": prefill {}/{}\n\n", e.done, e.total);
        break;
      case ResponseEvent::Kind::kOutput: {
        p.carried.insert(p.carried.end(), e.tokens.begin(), e.tokens.end());
        std::vector<ojson> deltas = p.acc.add(e, p.meta);
        if (deltas.empty()) break;
        ojson lp = p.logprobs ? p.acc.logprobs(p.carried, chat) : ojson();
        p.carried.clear();
        for (ojson& d : deltas) {
          out += sse_event(stream_chunk(p.meta, std::move(d), nullptr, lp));
          lp = nullptr;
        }
        break;
      }
      case ResponseEvent::Kind::kFinished: {
        const ojson lp = p.logprobs && !p.carried.empty() ? p.acc.logprobs(p.carried, chat) : ojson();
        ojson last = stream_chunk(p.meta, chat ? ojson::object() : ojson{{"text", ""}}, e.finish_reason, lp);
        if (p.include_usage) {
          out += sse_event(last);
          last = usage_chunk(p.meta, e.stats);
        }
        last["timings"] = timings_json(e.stats);
        out += sse_event(last);
        out += "data: [DONE]\n\n";
        log(p, e.stats, e.finish_reason);
        return true;
      }
      case ResponseEvent::Kind::kFailed:
        out += sse_event(failure(e).body());
        return true;
    }
  }
  return false;
}

// --- whole ---------------------------------------------------------------------------------------

bool CompletionEndpoint::collect(Pending& p, std::vector<ResponseEvent>& events) {
  for (ResponseEvent& e : events) {
    switch (e.kind) {
      case ResponseEvent::Kind::kPrefill:
        break;
      case ResponseEvent::Kind::kOutput:
        p.acc.add(e, p.meta);
        break;
      case ResponseEvent::Kind::kFinished:
        p.done = true;
        p.stats = e.stats;
        p.finish_reason = e.finish_reason;
        log(p, e.stats, e.finish_reason);
        return true;
      case ResponseEvent::Kind::kFailed:
        p.done = true;
        p.error = std::make_unique<ApiError>(failure(e));
        return true;
    }
  }
  return false;
}

void CompletionEndpoint::whole(const std::shared_ptr<Pending>& p, httplib::Response& res) {
  const auto ping =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.ping_interval_s));
  auto body = [](Pending& q) {
    return q.error ? wire_json(q.error->body())
                   : wire_json(whole_response(q.meta, q.acc, q.finish_reason, q.stats, q.logprobs));
  };
  // Most answers are ready within the interval: answered with their own status.
  const auto deadline = Clock::now() + ping;
  std::vector<ResponseEvent> events;
  while (!p->done) {
    const auto left = deadline - Clock::now();
    events.clear();
    if (left <= Clock::duration::zero() || !p->task->wait(events, left)) break;
    collect(*p, events);
  }
  if (p->done) {
    if (p->error)
      send_error(res, *p->error);
    else
      send_json(res, whole_response(p->meta, p->acc, p->finish_reason, p->stats, p->logprobs));
    return;
  }
  // Still running: 200 now, then a space per interval (a gone client fails the write and the
  // request is cancelled) until the body. A failure from here on is the body (an error object).
  ++open_responses_;
  res.set_chunked_content_provider(
      "application/json",
      [this, p, ping, body](size_t, httplib::DataSink& sink) {
        std::vector<ResponseEvent> batch;
        if (p->task->wait(batch, ping)) collect(*p, batch);
        std::string out;
        if (p->done)
          out = body(*p);
        else if (Clock::now() - p->last_write >= ping)
          out.push_back(' ');  // (not out = " ": a GCC 12 -Wrestrict false positive)
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) {
            p->task->cancel();
            return false;
          }
          p->last_write = Clock::now();
        }
        if (p->done) sink.done();
        return true;
      },
      [this, p](bool) {
        p->task->cancel();
        --open_responses_;
      });
}

void CompletionEndpoint::log(const Pending& p, const CompletionStats& s,
                             const std::string& finish_reason) const {
  if (!options_.log_requests) return;
  std::fprintf(stderr,
               "%s %s: prompt %lld tokens (%lld cached) in %.1f ms, %lld generated in %.1f ms (%.2f t/s), "
               "finish %s\n",
               p.meta.chat ? "chat" : "completion", p.meta.id.c_str(),
               static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.cached_tokens), s.prompt_ms,
               static_cast<long long>(s.generated_tokens), s.generation_ms,
               s.generation_ms > 0 ? 1000.0 * static_cast<double>(s.generated_tokens) / s.generation_ms : 0.0,
               finish_reason.c_str());
}

}  // namespace qwick
