// Tool calls -> GBNF text for Qwen's tool-call markup, with each call's arguments following its
// tool's JSON schema (tool_choice "required" or a named function, strict function tools).
//
// The markup is what the chat template writes and the output parser (text/output_parser.h)
// reads:
//
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//
// with several calls separated by "\n". A value is read by the types its schema declares
// (text/tool_arguments.h): a string parameter is raw text, any other value JSON. So a string
// parameter's text holds no markup tag ("<" is never followed by "/" or "p" there, nor ends it),
// JSON strings inside other values hold no "<" (they may write it as \u003c), and a parameter
// whose schema leaves its type open or mixes strings with other types is refused: its text could
// not be read back as a value the schema allows. Declared parameters come in their order, the
// required ones always and the optional ones optionally.
//
// What cannot be enforced is an UnsupportedSchema error naming the keyword and the tool.
//
// Tested in tests/constrain/tool_call_grammar_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "constrain/json_schema.h"

namespace qwick {

struct ToolCallRule {
  nlohmann::ordered_json tools;  // OpenAI function tools ({"type":"function","function":{...}})
  std::string name;              // the one function to call; empty: any of the tools
  bool parallel = true;          // several calls may follow each other
  // Free text (without "<tool_call>") may come first and the calls are optional: strict tools
  // under tool_choice "auto", where the model chooses but a call must fit.
  bool text_first = false;
};

// Throws UnsupportedSchema (a keyword that cannot be enforced) or Error (a malformed tool list,
// a name the markup cannot carry, a named function not among the tools).
std::string tool_call_gbnf(const ToolCallRule& rule, const JsonSchemaOptions& options = {});

}  // namespace qwick
