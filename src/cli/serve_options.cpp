#include "cli/serve_options.h"

#include <fmt/format.h>

#include "core/error.h"

namespace qwick {

void ServeOptions::add_to(ArgParser& p) {
  ServerOptions& s = server;
  p.option({"--host"}, "ADDR", "address to listen on", &s.host, "LLAMA_ARG_HOST");
  p.option({"--port"}, "N", "port to listen on (0 = any free port)", &s.port, "LLAMA_ARG_PORT");
  p.option({"-a", "--alias"}, "NAME", "model name in responses and /v1/models (default: the directory name)",
           &alias, "LLAMA_ARG_ALIAS");
  p.option({"--api-key"}, "KEY[,KEY...]",
           "require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (except /health and /v1/models)",
           &s.api_key, "LLAMA_API_KEY");
  p.option({"--api-key-file"}, "FILE", "more API keys, one a line", &s.api_key_file,
           "LLAMA_ARG_API_KEY_FILE");
  p.option({"--cors-origin"}, "LIST",
           "origins whose web pages may call the server (comma-separated; * = any; default: none)",
           &s.cors_origins, "QWICK_CORS_ORIGIN");
  p.option({"--allowed-hosts"}, "LIST",
           "Host names accepted besides localhost (on a loopback address the Host is checked against DNS "
           "rebinding)",
           &s.allowed_hosts, "QWICK_ALLOWED_HOSTS");
  p.option({"--threads-http"}, "N", "HTTP threads; each open connection holds one (0 = queue size + 16)",
           &s.http_threads, "LLAMA_ARG_THREADS_HTTP");
  p.option({"--queue-size"}, "N", "completions that may wait for the engine; more get 503", &s.queue_size,
           "QWICK_QUEUE_SIZE");
  p.option({"--max-body-size"}, "BYTES", "largest request body; larger get 413", &s.max_body_bytes,
           "QWICK_MAX_BODY_SIZE");
  p.option({"--timeout"}, "SECONDS", "socket read/write timeout", &s.timeout_s, "LLAMA_ARG_TIMEOUT");
  p.option({"--receive-timeout"}, "SECONDS",
           "total time a client has to send a request's head and body (slow senders are cut off)",
           &s.receive_timeout_s, "QWICK_RECEIVE_TIMEOUT");
  p.option({"--sse-ping-interval"}, "SECONDS",
           "keep-alive comment interval while a response waits (also how soon a gone client is noticed)",
           &s.ping_interval_s, "QWICK_SSE_PING_INTERVAL");
  p.option({"-n", "--n-predict"}, "N", "default most tokens per completion (-1 = until a stop token)",
           &n_predict, "LLAMA_ARG_N_PREDICT");
  p.option({"--temp"}, "T", "default temperature (else generation_config.json's, else 1)", &temp,
           "LLAMA_ARG_TEMP");
  p.option({"--top-k"}, "K", "default top-k (-1 = generation_config.json's, else off; 0 = off)", &top_k,
           "LLAMA_ARG_TOP_K");
  p.option({"--top-p"}, "P", "default top-p (else generation_config.json's, else 1)", &top_p,
           "LLAMA_ARG_TOP_P");
  p.option({"--min-p"}, "P", "default min-p (else generation_config.json's, else 0)", &min_p,
           "LLAMA_ARG_MIN_P");
  p.option({"--repeat-penalty"}, "X",
           "default repetition penalty (else generation_config.json's, else 1 = off)", &repeat_penalty,
           "LLAMA_ARG_REPEAT_PENALTY");
  p.option({"--repeat-last-n"}, "N", "tokens the penalties look back over (-1 = all)", &repeat_last_n,
           "LLAMA_ARG_REPEAT_LAST_N");
  p.option({"--presence-penalty"}, "X", "default presence penalty (else generation_config.json's, else 0)",
           &presence_penalty, "LLAMA_ARG_PRESENCE_PENALTY");
  p.option({"--frequency-penalty"}, "X", "default frequency penalty (else 0)", &frequency_penalty,
           "LLAMA_ARG_FREQUENCY_PENALTY");
  p.option({"-s", "--seed"}, "N", "default sampling seed (-1 = a random one per request)", &seed,
           "LLAMA_ARG_SEED");
  p.option({"--chat-template-kwargs"}, "JSON",
           "default chat template arguments, e.g. '{\"enable_thinking\": false}' (requests add to them)",
           &chat_template_kwargs, "LLAMA_CHAT_TEMPLATE_KWARGS");
  p.option({"--reasoning-format"}, "FORMAT",
           "deepseek (or auto): reasoning in its own field; none: raw text with the think tags in content",
           &reasoning_format, "LLAMA_ARG_THINK");
  p.option({"--reasoning-field"}, "NAME",
           "name of the reasoning field: reasoning_content, or reasoning (vLLM)", &s.reasoning_field,
           "QWICK_REASONING_FIELD");
  p.flag({"--cache-prompt"}, "reuse saved sequence state across requests (--no-cache-prompt = never)",
         &cache_prompt, "QWICK_CACHE_PROMPT");
  p.option({"--cache-ram"}, "MIB",
           "memory for saved sequence states (device memory with CUDA); 0 = none; -1 = --cache-ram-fraction "
           "of the memory free after loading",
           &cache_ram_mib, "LLAMA_ARG_CACHE_RAM");
  p.option({"--cache-ram-fraction"}, "F",
           "prompt-cache budget as a share of the free memory, without --cache-ram", &cache_ram_fraction,
           "QWICK_CACHE_RAM_FRACTION");
  p.option({"--cache-min-tokens"}, "N",
           "prompt prefixes shorter than this are not saved (cheaper to prefill again than to keep)",
           &cache_min_tokens, "QWICK_CACHE_MIN_TOKENS");
  p.option({"-ub", "--ubatch-size", "--chunk"}, "N",
           "prefill chunk size (cancellation is checked between chunks)", &chunk, "LLAMA_ARG_UBATCH");
  p.flag({"-sp", "--special"}, "show the control tokens the model writes (<|box_end|>, ...) in the text",
         &s.special, "LLAMA_ARG_SPECIAL");
  p.flag({"--special-in-messages"},
         "control-token strings typed in messages (<|im_end|>, ...) become control tokens; by default they "
         "are plain text, so message text cannot fake role boundaries",
         &s.special_in_messages, "QWICK_SPECIAL_IN_MESSAGES");
  p.flag({"--log-requests"}, "one line per completion on stderr", &s.log_requests, "QWICK_LOG_REQUESTS");
}

void ServeOptions::validate() const {
  if (server.port < 0 || server.port > 65535) fail("--port must be 0 .. 65535, got {}", server.port);
  if (server.queue_size < 1) fail("--queue-size must be at least 1, got {}", server.queue_size);
  if (server.http_threads < 0) fail("--threads-http must not be negative, got {}", server.http_threads);
  if (server.max_body_bytes < 1024)
    fail("--max-body-size must be at least 1024, got {}", server.max_body_bytes);
  if (server.timeout_s < 1) fail("--timeout must be at least 1 second, got {}", server.timeout_s);
  if (!(server.receive_timeout_s > 0))
    fail("--receive-timeout must be positive, got {}", server.receive_timeout_s);
  if (server.ping_interval_s <= 0)
    fail("--sse-ping-interval must be positive, got {}", server.ping_interval_s);
  if (cache_ram_mib < -1)
    fail("--cache-ram must be -1 (a share of the free memory) or more, got {}", cache_ram_mib);
  if (!(cache_ram_fraction > 0 && cache_ram_fraction <= 1))
    fail("--cache-ram-fraction must be in (0, 1], got {}", cache_ram_fraction);
  if (cache_min_tokens < 0) fail("--cache-min-tokens must not be negative, got {}", cache_min_tokens);
  if (chunk < 1) fail("--ubatch-size must be at least 1, got {}", chunk);
  if (server.reasoning_field != "reasoning_content" && server.reasoning_field != "reasoning")
    fail("--reasoning-field must be reasoning_content or reasoning, got \"{}\"", server.reasoning_field);
  if (reasoning_format != "deepseek" && reasoning_format != "auto" && reasoning_format != "none")
    fail("--reasoning-format must be deepseek, auto or none, got \"{}\"", reasoning_format);
  if (!chat_template_kwargs.empty()) {
    const auto k = nlohmann::ordered_json::parse(chat_template_kwargs, nullptr, false);
    if (k.is_discarded() || !k.is_object())
      fail("--chat-template-kwargs must be a JSON object, got {}", chat_template_kwargs);
  }
}

RequestDefaults ServeOptions::request_defaults(const GenerationConfig& g, int64_t vocab_size) const {
  validate();
  RequestDefaults d;
  SamplingParams& s = d.sampling;
  const bool sample = g.do_sample.value_or(true);
  s.temperature = static_cast<float>(temp.value_or(sample ? g.temperature.value_or(1.0f) : 0.0f));
  s.top_p = static_cast<float>(top_p.value_or(g.top_p.value_or(1.0f)));
  s.top_k = top_k >= 0 ? top_k : g.top_k.value_or(0);
  s.min_p = static_cast<float>(min_p.value_or(g.min_p.value_or(0.0f)));
  s.repetition_penalty = static_cast<float>(repeat_penalty.value_or(g.repetition_penalty.value_or(1.0f)));
  s.presence_penalty = static_cast<float>(presence_penalty.value_or(g.presence_penalty.value_or(0.0f)));
  s.frequency_penalty = static_cast<float>(frequency_penalty.value_or(0.0));
  s.penalty_last_n = repeat_last_n;
  d.seed = seed;
  d.max_tokens = n_predict;
  if (!chat_template_kwargs.empty())
    d.chat_template_kwargs = nlohmann::ordered_json::parse(chat_template_kwargs);
  d.reasoning_format = reasoning_format == "none" ? ReasoningFormat::kNone : ReasoningFormat::kParsed;
  d.cache_prompt = cache_prompt;
  d.vocab_size = vocab_size;
  return d;
}

std::string ServeOptions::describe(const RequestDefaults& d) {
  const SamplingParams& s = d.sampling;
  return fmt::format(
      "defaults: temperature {} top_k {} top_p {} min_p {} repeat_penalty {} presence_penalty {} "
      "frequency_penalty {} max_tokens {} seed {} chat_template_kwargs {}",
      s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty, s.presence_penalty, s.frequency_penalty,
      d.max_tokens, d.seed, d.chat_template_kwargs.dump());
}

}  // namespace qwick
