#include "server/openai_format.h"

#include <algorithm>
#include <random>

#include "server/api_error.h"
#include "text/utf8.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

// -inf (a token the model rules out) would dump as null; llama-server clamps the same way.
double finite_logprob(float lp) {
  return std::max(static_cast<double>(lp), -9999.0);
}

ojson bytes_json(std::string_view bytes) {
  ojson b = ojson::array();
  for (unsigned char c : bytes) b.push_back(c);
  return b;
}

}  // namespace

std::string random_id(const std::string& prefix, size_t length) {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (size_t i = 0; i < length; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

std::string sse_event(const ojson& data) {
  return "data: " + wire_json(data) + "\n\n";
}

ojson usage_json(const CompletionStats& s) {
  return {{"completion_tokens", s.generated_tokens},
          {"prompt_tokens", s.prompt_tokens},
          {"total_tokens", s.prompt_tokens + s.generated_tokens},
          {"completion_tokens_details", {{"reasoning_tokens", s.reasoning_tokens}}},
          {"prompt_tokens_details", {{"cached_tokens", s.cached_tokens}}}};
}

ojson timings_json(const CompletionStats& s) {
  const int64_t prompt_n = s.prompt_tokens - s.cached_tokens;
  auto per_token = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto per_second = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * static_cast<double>(n) / ms : 0.0; };
  return {{"cache_n", s.cached_tokens},
          {"prompt_n", prompt_n},
          {"prompt_ms", s.prompt_ms},
          {"prompt_per_token_ms", per_token(s.prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(s.prompt_ms, prompt_n)},
          {"predicted_n", s.generated_tokens},
          {"predicted_ms", s.generation_ms},
          {"predicted_per_token_ms", per_token(s.generation_ms, s.generated_tokens)},
          {"predicted_per_second", per_second(s.generation_ms, s.generated_tokens)},
          {"draft_n", s.draft_n},
          {"draft_n_accepted", s.draft_n_accepted}};
}

std::vector<ojson> ResponseAccumulator::add(const ResponseEvent& event, const ResponseMeta& meta) {
  tokens_.insert(tokens_.end(), event.tokens.begin(), event.tokens.end());
  std::vector<ojson> out;
  std::string text;  // completions: the event's text as one delta
  for (const OutputDelta& d : event.deltas) {
    switch (d.kind) {
      case OutputDelta::Kind::kReasoning:
        reasoning_ += d.text;
        out.push_back({{meta.reasoning_field, d.text}});
        break;
      case OutputDelta::Kind::kContent:
        content_ += d.text;
        if (meta.chat)
          out.push_back({{"content", d.text}});
        else
          text += d.text;
        break;
      case OutputDelta::Kind::kToolCallStart: {
        calls_.push_back({random_id("call_", 24), d.text, ""});
        ojson call = {{"index", d.tool_index},
                      {"id", calls_.back().id},
                      {"type", "function"},
                      {"function", {{"name", d.text}, {"arguments", ""}}}};
        out.push_back({{"tool_calls", ojson::array({call})}});
        break;
      }
      case OutputDelta::Kind::kToolCallArguments:
        calls_[static_cast<size_t>(d.tool_index)].arguments += d.text;
        out.push_back({{"tool_calls",
                        ojson::array({{{"index", d.tool_index}, {"function", {{"arguments", d.text}}}}})}});
        break;
    }
  }
  if (!meta.chat && !text.empty()) out.push_back({{"text", text}});
  return out;
}

ojson ResponseAccumulator::logprobs(const std::vector<GeneratedToken>& tokens, bool chat) {
  if (chat) {
    ojson content = ojson::array();
    for (const GeneratedToken& t : tokens) {
      const std::string_view bytes = tokenizer_.token_bytes(t.id);
      ojson top = ojson::array();
      for (const TokenLogprob& alt : t.top) {
        const std::string_view b = tokenizer_.token_bytes(alt.id);
        top.push_back(
            {{"token", utf8_lossy(b)}, {"logprob", finite_logprob(alt.logprob)}, {"bytes", bytes_json(b)}});
      }
      content.push_back({{"id", t.id},
                         {"token", utf8_lossy(bytes)},
                         {"logprob", finite_logprob(t.logprob)},
                         {"bytes", bytes_json(bytes)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  ojson toks = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  for (const GeneratedToken& t : tokens) {
    const std::string_view bytes = tokenizer_.token_bytes(t.id);
    toks.push_back(utf8_lossy(bytes));
    lps.push_back(finite_logprob(t.logprob));
    ojson top = ojson::object();
    for (const TokenLogprob& alt : t.top)
      top[utf8_lossy(tokenizer_.token_bytes(alt.id))] = finite_logprob(alt.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(bytes.size());
  }
  return {{"tokens", std::move(toks)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

ojson stream_chunk(const ResponseMeta& meta, ojson delta, const ojson& finish_reason, const ojson& logprobs) {
  ojson choice;
  if (meta.chat) {
    choice = {{"finish_reason", finish_reason}, {"index", 0}, {"delta", std::move(delta)}};
    if (!logprobs.is_null()) choice["logprobs"] = logprobs;
  } else {
    choice = {{"text", delta.is_object() && delta.contains("text") ? delta["text"] : ojson("")},
              {"index", 0},
              {"logprobs", logprobs},
              {"finish_reason", finish_reason}};
  }
  return {{"choices", ojson::array({std::move(choice)})},
          {"created", meta.created},
          {"id", meta.id},
          {"model", meta.model},
          {"system_fingerprint", meta.fingerprint},
          {"object", meta.chat ? "chat.completion.chunk" : "text_completion"}};
}

ojson usage_chunk(const ResponseMeta& meta, const CompletionStats& stats) {
  return {{"choices", ojson::array()},
          {"created", meta.created},
          {"id", meta.id},
          {"model", meta.model},
          {"system_fingerprint", meta.fingerprint},
          {"object", meta.chat ? "chat.completion.chunk" : "text_completion"},
          {"usage", usage_json(stats)}};
}

ojson whole_response(const ResponseMeta& meta, ResponseAccumulator& acc, const std::string& finish_reason,
                     const CompletionStats& stats, bool logprobs) {
  ojson choice;
  const ojson lp = logprobs ? acc.logprobs(acc.tokens(), meta.chat) : ojson();
  if (meta.chat) {
    ojson message = {{"role", "assistant"}};
    // llama-server: content is null when the reply is only tool calls.
    message["content"] = acc.content().empty() && !acc.calls().empty() ? ojson() : ojson(acc.content());
    if (!acc.reasoning().empty()) message[meta.reasoning_field] = acc.reasoning();
    if (!acc.calls().empty()) {
      ojson calls = ojson::array();
      for (const AccumulatedCall& c : acc.calls())
        calls.push_back({{"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", c.arguments}}},
                         {"id", c.id}});
      message["tool_calls"] = std::move(calls);
    }
    choice = {{"finish_reason", finish_reason}, {"index", 0}, {"message", std::move(message)}};
    if (logprobs) choice["logprobs"] = lp;
  } else {
    choice = {{"text", acc.content()}, {"index", 0}, {"logprobs", lp}, {"finish_reason", finish_reason}};
  }
  return {{"choices", ojson::array({std::move(choice)})},
          {"created", meta.created},
          {"model", meta.model},
          {"system_fingerprint", meta.fingerprint},
          {"object", meta.chat ? "chat.completion" : "text_completion"},
          {"usage", usage_json(stats)},
          {"id", meta.id},
          {"timings", timings_json(stats)}};
}

}  // namespace qwick
