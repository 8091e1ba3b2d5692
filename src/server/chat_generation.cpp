#include "server/chat_generation.h"

#include <chrono>
#include <cstdio>

#include "text/chat_prompt.h"

namespace qwick {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration ping_interval(const ServerOptions& options) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.ping_interval_s));
}

void log_finished(const ServerOptions& options, const std::string& label, const ResponseEvent& e) {
  if (!options.log_requests) return;
  const CompletionStats& s = e.stats;
  std::fprintf(stderr,
               "%s: prompt %lld tokens (%lld cached) in %.1f ms, %lld generated in %.1f ms (%.2f t/s), "
               "finish %s\n",
               label.c_str(), static_cast<long long>(s.prompt_tokens),
               static_cast<long long>(s.cached_tokens), s.prompt_ms,
               static_cast<long long>(s.generated_tokens), s.generation_ms,
               s.generation_ms > 0 ? 1000.0 * static_cast<double>(s.generated_tokens) / s.generation_ms : 0.0,
               e.finish_reason.c_str());
}

// A task and its writer, as the HTTP side keeps them.
struct Answer {
  std::shared_ptr<ResponseTask> task;
  std::shared_ptr<ChatWriter> writer;
  bool started = false, done = false;
  int prefill_events = 0;
  Clock::time_point last_write = Clock::now();

  // Passes the events to the writer (stream text into `out` when streaming); prefill progress
  // becomes SSE comments in a stream. True once complete.
  bool add(const ServerOptions& options, std::vector<ResponseEvent>& events, std::string* out) {
    std::vector<ResponseEvent> rest;
    for (ResponseEvent& e : events) {
      if (e.kind == ResponseEvent::Kind::kPrefill) {
        // Between chunks of a long prefill: a comment, so a client that went away is noticed.
        if (prefill_events++ > 0 && e.done < e.total && out != nullptr)
          *out += fmt::format(": prefill {}/{}\n\n", e.done, e.total);
        continue;
      }
      if (e.kind == ResponseEvent::Kind::kFinished) log_finished(options, writer->label(), e);
      rest.push_back(std::move(e));
    }
    if (!rest.empty() && writer->add(rest, out)) done = true;
    return done;
  }
};

}  // namespace

ApiError generation_failure(const ResponseEvent& e) {
  return e.shutting_down ? ApiError(503, "the server is shutting down")
                         : ApiError(500, "generation failed: " + e.error);
}

ChatSubmission submit_job(ServerContext& ctx, CompletionJob job, ResponseOptions options,
                          const std::string& prompt_param) {
  const auto n_prompt = static_cast<int64_t>(job.prompt.size());
  const int64_t n_ctx = ctx.model.engine->context_size();
  if (n_prompt == 0) throw invalid_request("the prompt is empty", prompt_param);
  if (n_prompt >= n_ctx) {
    ApiError e(
        400,
        fmt::format("the request exceeds the available context size: {} prompt tokens, the context "
                    "holds {}",
                    n_prompt > n_ctx ? fmt::format("more than {}", n_ctx) : std::to_string(n_prompt), n_ctx),
        "", "exceed_context_size_error");
    e.extra = {{"n_prompt_tokens", n_prompt}, {"n_ctx", n_ctx}};  // (counted up to where tokenizing stopped)
    throw e;
  }
  job.stop_ids = ctx.model.stop_ids;
  options.special = ctx.options.special;
  ChatSubmission s;
  s.prompt_tokens = n_prompt;
  s.task = std::make_shared<ResponseTask>(*ctx.model.tokenizer, std::move(options), ctx.metrics);
  s.task->job = std::move(job);
  if (!ctx.queue.submit(s.task)) {
    ctx.metrics.record_rejected();
    throw ApiError(503, fmt::format("the server is busy ({} requests are waiting already); retry later",
                                    ctx.queue.capacity()));
  }
  return s;
}

ChatSubmission submit_chat(ServerContext& ctx, const CompletionRequest& r,
                           const std::string& messages_param) {
  // Tokenizing stops at the context size: a huge conversation is refused without encoding it all.
  const auto token_limit = static_cast<size_t>(ctx.model.engine->context_size());
  ChatPrompt prompt = build_chat_prompt(r.conversation, ctx.model.template_kind, *ctx.model.tokenizer,
                                        r.cache_prompt, ctx.options.special_in_messages, token_limit);
  ResponseOptions ro;
  ro.chat = true;
  ro.stop = r.stop;
  ro.logprobs = r.logprobs;
  ro.parallel_tool_calls = r.parallel_tool_calls;
  ro.parser.starts_in_reasoning = prompt.text.ends_with("<think>\n");
  ro.parser.tools = r.conversation.tools.is_array() ? r.conversation.tools : nlohmann::ordered_json::array();
  ro.parser.reasoning = r.reasoning_format == ReasoningFormat::kParsed;
  ro.parser.tool_calls = r.tool_calls;

  CompletionJob job;
  job.prompt = std::move(prompt.tokens);
  if (prompt.history_tokens > 0) job.snapshot_at.push_back(prompt.history_tokens);
  job.sampling = r.sampling;
  job.max_tokens = r.max_tokens;
  job.top_logprobs = r.logprobs ? r.top_logprobs : -1;
  job.reuse = r.cache_prompt;
  if (r.constraint) {
    const int32_t start_after =
        ro.parser.starts_in_reasoning ? ctx.model.tokenizer->added_token_id("</think>").value_or(-1) : -1;
    job.constraint = ctx.constraints.make(*r.constraint, ctx.model.stop_ids, start_after);
  }
  return submit_job(ctx, std::move(job), std::move(ro), messages_param);
}

void send_stream(ServerContext& ctx, std::shared_ptr<ResponseTask> task, std::shared_ptr<ChatWriter> writer,
                 httplib::Response& res) {
  auto a = std::make_shared<Answer>();
  a->task = std::move(task);
  a->writer = std::move(writer);
  ++ctx.open_responses;
  const Clock::duration ping = ping_interval(ctx.options);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, a, ping](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!a->started) {
          a->started = true;
          out = a->writer->stream_start();
        }
        std::vector<ResponseEvent> events;
        if (a->task->wait(events, ping))
          a->add(ctx.options, events, &out);
        else if (out.empty())
          out = ": ping\n\n";  // an SSE comment: clients skip it, a gone client fails the write
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          a->task->cancel();
          return false;
        }
        if (a->done) sink.done();
        return true;
      },
      [&ctx, a](bool) {
        a->task->cancel();
        --ctx.open_responses;
      });
}

void send_whole(ServerContext& ctx, std::shared_ptr<ResponseTask> task, std::shared_ptr<ChatWriter> writer,
                httplib::Response& res) {
  auto a = std::make_shared<Answer>();
  a->task = std::move(task);
  a->writer = std::move(writer);
  const Clock::duration ping = ping_interval(ctx.options);
  // Most answers are ready within the interval: answered with their own status.
  const auto deadline = Clock::now() + ping;
  std::vector<ResponseEvent> events;
  while (!a->done) {
    const auto left = deadline - Clock::now();
    events.clear();
    if (left <= Clock::duration::zero() || !a->task->wait(events, left)) break;
    a->add(ctx.options, events, nullptr);
  }
  if (a->done) {
    res.status = a->writer->status();
    res.set_content(a->writer->body(), "application/json");
    return;
  }
  // Still running: 200 now, then a space per interval (a gone client fails the write and the
  // request is cancelled) until the body. A failure from here on is the body (an error object).
  ++ctx.open_responses;
  res.set_chunked_content_provider(
      "application/json",
      [&ctx, a, ping](size_t, httplib::DataSink& sink) {
        std::vector<ResponseEvent> batch;
        if (a->task->wait(batch, ping)) a->add(ctx.options, batch, nullptr);
        std::string out;
        if (a->done)
          out = a->writer->body();
        else if (Clock::now() - a->last_write >= ping)
          out.push_back(' ');
        if (!out.empty()) {
          if (!sink.write(out.data(), out.size())) {
            a->task->cancel();
            return false;
          }
          a->last_write = Clock::now();
        }
        if (a->done) sink.done();
        return true;
      },
      [&ctx, a](bool) {
        a->task->cancel();
        --ctx.open_responses;
      });
}

}  // namespace qwick
