// Streaming parser of Qwen3.6 output: generated text in, reasoning / content / tool-call deltas out.
//
// The model writes   [reasoning]</think>\n\n[content][<tool_call>\n<function=NAME>\n
//                    <parameter=K>\nVALUE\n</parameter>\n...</function>\n</tool_call>]...
// With thinking on, the prompt already opened <think>, so the output starts inside the reasoning
// (starts_in_reasoning); with it off the output starts in the content, where a leading <think>
// still opens reasoning. <tool_call> also ends the reasoning (the model sometimes skips </think>).
//
//   reasoning --</think>--> content --<tool_call>--> call open --<function=NAME>--> call body
//   call body --<parameter=K>--> value --</parameter>--> call body --</function>--> call close
//   call close --</tool_call>--> content (more calls or text may follow)
//
// Reasoning and content deltas are emitted as soon as they are certain: only a suffix that could
// be the start of a tag, and trailing whitespace (dropped at the ends of reasoning and content),
// are held back. A tool call is emitted once it is complete (</function> written) and fits the
// declared tools (tool_arguments.h: a declared name, arguments of the declared types, required
// ones present): a start {index, name}, then one argument fragment per parameter, whose
// concatenation is the arguments object. Parameter values are converted by the tools' JSON schema.
// Clients act on tool calls, so anything less is not returned as one: a call cut short (by the
// token limit or a stop string), one that does not fit, and one with stray text inside become
// text, as written, in the part (reasoning or content) where the call opened. A call opened
// inside the reasoning returns to the reasoning afterwards, so a later </think> still splits
// reasoning from content.
//
// Malformed output never throws and loses no text: a <tool_call> not followed by <function=...>
// (or by Qwen3-style JSON {"name", "arguments"}) is text as written, a missing </parameter> or
// </tool_call> is tolerated. Results do not depend on how the text is chunked.
//
// Tested in tests/text/output_parser_test.cpp: the same outputs fed whole, byte by byte and token
// by token (real Qwen tokenization) give identical deltas and messages; malformed cases.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace qwick {

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, as text (OpenAI's `function.arguments`)
};

struct ParsedMessage {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
};

struct OutputDelta {
  enum class Kind {
    kReasoning,          // text: more reasoning_content
    kContent,            // text: more content
    kToolCallStart,      // text: the function name of call `tool_index` (arguments start empty)
    kToolCallArguments,  // text: the next fragment of call `tool_index`'s arguments
  };
  Kind kind;
  std::string text;
  int tool_index = -1;
  bool operator==(const OutputDelta&) const = default;
};

struct OutputParserOptions {
  bool starts_in_reasoning = true;                                 // the prompt ended with "<think>\n"
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // the request's tools (types)
  // Off, <think> and </think> are plain content (a server's "reasoning_format: none").
  bool reasoning = true;
  // Off, <tool_call> is plain text (a request without tools, or with tool_choice "none").
  bool tool_calls = true;
};

class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);

  // Consumes more generated text (valid UTF-8) and appends the deltas now certain.
  void feed(std::string_view text, std::vector<OutputDelta>& deltas);
  // End of generation: emits what was held back and closes an unfinished tool call.
  void finish(std::vector<OutputDelta>& deltas);

  // The next text fed is read as reasoning (the state of the parser now).
  bool in_reasoning() const { return state_ == State::kReasoning; }

  // The message so far (complete after finish()).
  const ParsedMessage& message() const { return message_; }

 private:
  enum class State { kReasoning, kContent, kCallOpen, kCallJson, kCallBody, kValue, kCallClose };

  bool step(std::vector<OutputDelta>& deltas);  // false: needs more input
  bool step_text(std::vector<OutputDelta>& deltas);
  bool step_call_open(std::vector<OutputDelta>& deltas);
  bool step_call_json(std::vector<OutputDelta>& deltas);
  bool step_call_body(std::vector<OutputDelta>& deltas);
  bool step_value();
  bool step_call_close(std::vector<OutputDelta>& deltas);

  void emit_text(OutputDelta::Kind kind, std::string_view text, std::vector<OutputDelta>& deltas);
  // Moves `n` bytes of pending input into the raw text of the call being read.
  void consume(size_t n);
  void end_value();
  // The call is complete: emitted if it fits the tools, else its raw text.
  void end_call(std::vector<OutputDelta>& deltas);
  void call_failed(std::vector<OutputDelta>& deltas);
  void resume_text();  // back to the reasoning or content the call opened in
  void skip_whitespace();

  OutputParserOptions options_;
  ParsedMessage message_;
  State state_;
  std::string pending_;        // input not consumed yet
  bool segment_start_ = true;  // leading whitespace of reasoning/content is skipped
  bool think_allowed_;         // a <think> here would open (or repeat the opening of) reasoning
  // The call being read: its text as written (in case it is not a call), name and arguments.
  std::string call_raw_;
  bool call_in_reasoning_ = false;  // opened inside the reasoning
  bool call_malformed_ = false;     // stray text or a repeated parameter inside
  std::string call_name_;
  nlohmann::ordered_json call_arguments_;
  std::string param_name_, param_value_;
};

}  // namespace qwick
