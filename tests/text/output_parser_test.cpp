// Output parser: model outputs fed whole, one byte at a time, one token at a time (the real Qwen3
// tokenizer, through the streaming detokenizer) and in random chunks give identical deltas and
// messages; the expected reasoning / content / tool calls; malformed outputs; parameter typing.
#include <gtest/gtest.h>

#include <random>

#include "text/output_parser.h"
#include "text/stream_decoder.h"
#include "text/tokenizer.h"
#include "text/tool_arguments.h"
#include "text_test_support.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;
using Kind = OutputDelta::Kind;

const ojson kTools = ojson::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "location": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "ratio": {"type": "number"}, "filters": {"type": "object"}, "tags": {"type": "array"},
    "note": {"type": ["string", "null"]}, "mode": {"enum": ["fast", "slow"]},
    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}},
  {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {
    "id": {"type": "integer"}}, "required": ["id"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "list_files"}},
  {"type": "function", "function": {"name": "f"}}])");

struct Result {
  std::vector<OutputDelta> deltas;  // adjacent text deltas of one kind merged
  ParsedMessage message;
};

void merge_into(std::vector<OutputDelta>& merged, const std::vector<OutputDelta>& deltas) {
  for (const auto& d : deltas) {
    const bool text = d.kind == Kind::kReasoning || d.kind == Kind::kContent;
    if (text && !merged.empty() && merged.back().kind == d.kind)
      merged.back().text += d.text;
    else
      merged.push_back(d);
  }
}

Result parse_chunks(const std::vector<std::string>& chunks, bool starts_in_reasoning) {
  OutputParser parser({starts_in_reasoning, kTools});
  Result r;
  std::vector<OutputDelta> deltas;
  for (const auto& c : chunks) {
    deltas.clear();
    parser.feed(c, deltas);
    for (const auto& d : deltas) EXPECT_FALSE(d.text.empty() && d.kind != Kind::kToolCallArguments);
    merge_into(r.deltas, deltas);
  }
  deltas.clear();
  parser.finish(deltas);
  merge_into(r.deltas, deltas);
  r.message = parser.message();
  return r;
}

const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::from_file(test::tokenizer_fixture("qwen3"));
  return t;
}

// Parses `output` whole, byte by byte, token by token and in random chunks; all must agree.
Result parse_all_ways(const std::string& output, bool starts_in_reasoning = true) {
  const Result whole = parse_chunks({output}, starts_in_reasoning);
  std::vector<std::string> bytes;
  for (char c : output) bytes.emplace_back(1, c);
  std::vector<std::string> tokens;
  StreamDecoder decoder(qwen3());
  for (int32_t id : qwen3().encode(output, true)) tokens.push_back(decoder.push(id));
  tokens.push_back(decoder.flush());
  std::mt19937 rng(static_cast<unsigned>(output.size()));
  std::vector<std::string> random;
  for (size_t pos = 0; pos < output.size();) {
    const size_t n = std::min<size_t>(output.size() - pos, 1 + rng() % 7);
    random.push_back(output.substr(pos, n));
    pos += n;
  }
  for (const auto* chunks : {&bytes, &tokens, &random}) {
    const Result r = parse_chunks(*chunks, starts_in_reasoning);
    EXPECT_EQ(r.deltas, whole.deltas) << "chunked differently: " << output;
    EXPECT_EQ(r.message.reasoning_content, whole.message.reasoning_content);
    EXPECT_EQ(r.message.content, whole.message.content);
    EXPECT_EQ(r.message.tool_calls.size(), whole.message.tool_calls.size());
  }
  // Every call's argument fragments concatenate to valid JSON equal to the message's.
  for (size_t i = 0; i < whole.message.tool_calls.size(); ++i) {
    std::string args;
    for (const auto& d : whole.deltas)
      if (d.kind == Kind::kToolCallArguments && d.tool_index == static_cast<int>(i)) args += d.text;
    EXPECT_EQ(args, whole.message.tool_calls[i].arguments);
    EXPECT_TRUE(ojson::accept(args)) << args;
  }
  return whole;
}

TEST(OutputParser, ReasoningThenContent) {
  const Result r = parse_all_ways("The user asks 2+2.\nThat is 4.\n</think>\n\nThe answer is **4**.\n");
  EXPECT_EQ(r.message.reasoning_content, "The user asks 2+2.\nThat is 4.");
  EXPECT_EQ(r.message.content, "The answer is **4**.");
  EXPECT_TRUE(r.message.tool_calls.empty());
  ASSERT_EQ(r.deltas.size(), 2u);
  EXPECT_EQ(r.deltas[0].kind, Kind::kReasoning);
  EXPECT_EQ(r.deltas[1].kind, Kind::kContent);
}

TEST(OutputParser, ToolCallWithTypedParameters) {
  const Result r = parse_all_ways(
      "Need the weather.\n</think>\n\nLet me check.\n\n<tool_call>\n<function=get_weather>\n"
      "<parameter=location>\nSão Paulo\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
      "<parameter=metric>\nTrue\n</parameter>\n<parameter=ratio>\n0.25\n</parameter>\n"
      "<parameter=filters>\n{\"rain\": true}\n</parameter>\n<parameter=tags>\n[\"a\", 1]\n</parameter>\n"
      "<parameter=note>\nnull\n</parameter>\n<parameter=mode>\nfast\n</parameter>\n"
      "<parameter=limit>\nnull\n</parameter>\n<parameter=extra>\nline 1\nline 2\n</parameter>\n"
      "</function>\n</tool_call>");
  EXPECT_EQ(r.message.reasoning_content, "Need the weather.");
  EXPECT_EQ(r.message.content, "Let me check.");
  ASSERT_EQ(r.message.tool_calls.size(), 1u);
  EXPECT_EQ(r.message.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.message.tool_calls[0].arguments,
            R"({"location":"São Paulo","days":3,"metric":true,"ratio":0.25,"filters":{"rain":true},)"
            R"("tags":["a",1],"note":null,"mode":"fast","limit":null,"extra":"line 1\nline 2"})");
  // A start delta with the name, then one fragment per parameter, then the closing brace.
  std::vector<Kind> kinds;
  for (const auto& d : r.deltas) kinds.push_back(d.kind);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), Kind::kToolCallStart), 1);
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), Kind::kToolCallArguments), 11);
}

TEST(OutputParser, ParallelCallsAndToolCallEndsReasoning) {
  const Result r = parse_all_ways(
      "Two "
      "cities.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nTokyo\n</parameter>\n</function>\n"
      "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=location>\nOsaka\n</parameter>\n</"
      "function>\n"
      "</tool_call>");
  EXPECT_EQ(r.message.reasoning_content, "Two cities.");
  EXPECT_EQ(r.message.content, "");
  ASSERT_EQ(r.message.tool_calls.size(), 2u);
  EXPECT_EQ(r.message.tool_calls[0].arguments, R"({"location":"Tokyo"})");
  EXPECT_EQ(r.message.tool_calls[1].arguments, R"({"location":"Osaka"})");
  EXPECT_EQ(r.deltas.back().tool_index, 1);
}

TEST(OutputParser, ThinkingOff) {
  Result r = parse_all_ways("Hello! <think> is just text here.", false);
  EXPECT_EQ(r.message.content, "Hello! <think> is just text here.");
  EXPECT_EQ(r.message.reasoning_content, "");
  r = parse_all_ways("<think>\nhmm\n</think>\n\nHi.", false);
  EXPECT_EQ(r.message.reasoning_content, "hmm");
  EXPECT_EQ(r.message.content, "Hi.");
  // A repeated opening tag inside the forced-open reasoning is not text.
  r = parse_all_ways("<think>\nx\n</think>\n\ny");
  EXPECT_EQ(r.message.reasoning_content, "x");
  EXPECT_EQ(r.message.content, "y");
}

// Output cut short (the token limit, a stop string) keeps its text; a call cut before
// </function> is never a call, whatever it had written.
TEST(OutputParser, CutShortOutputsLoseNothingAndAreNoCalls) {
  Result r = parse_all_ways("Still thinking about</thi");
  EXPECT_EQ(r.message.reasoning_content, "Still thinking about</thi");
  r = parse_all_ways("r</think>\n\nok <tool_c");
  EXPECT_EQ(r.message.content, "ok <tool_c");
  for (const std::string cut : {"<tool_call>\n<function=get_weather>\n<parameter=location>\nPar",
                                "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</param",
                                "<tool_call>\n<function=get_weather>\n<parameter=loca",
                                "<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n",
                                "<tool_call>\n<function=get_wea", "<tool_call>\n{\"name\": \"f\", \"argu"}) {
    r = parse_all_ways("r</think>" + cut);
    EXPECT_TRUE(r.message.tool_calls.empty()) << cut;
    EXPECT_EQ(r.message.content, cut.substr(0, cut.find_last_not_of('\n') + 1)) << cut;
  }
  // Complete once </function> is written, </tool_call> or not.
  r = parse_all_ways(
      "r</think><tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool");
  ASSERT_EQ(r.message.tool_calls.size(), 1u);
  EXPECT_EQ(r.message.tool_calls[0].arguments, R"({"days":2})");
  EXPECT_EQ(r.message.content, "");
}

// Calls are checked against the declared tools; one that does not fit is text, as written.
TEST(OutputParser, CallsThatDoNotFitTheToolsAreText) {
  const std::string fits =
      "<tool_call>\n<function=lookup>\n<parameter=id>\n7\n</parameter>\n</function>\n</tool_call>";
  Result r = parse_all_ways("r</think>" + fits);
  ASSERT_EQ(r.message.tool_calls.size(), 1u);
  EXPECT_EQ(r.message.tool_calls[0].arguments, R"({"id":7})");
  for (const std::string bad :
       {"<tool_call>\n<function=delete_all>\n</function>\n</tool_call>",  // not declared
        "<tool_call>\n<function=lookup>\n<parameter=id>\nabc\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=lookup>\n</function>\n</tool_call>",  // required id missing
        "<tool_call>\n<function=lookup>\n<parameter=id>\n1\n</parameter>\n<parameter=x>\n1\n"
        "</parameter>\n</function>\n</tool_call>",  // additionalProperties false
        "<tool_call>\n<function=get_weather>\n<parameter=mode>\nmedium\n</parameter>\n</function>\n"
        "</tool_call>",  // not in the enum
        "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"id\": \"7\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"}) {
    r = parse_all_ways("r</think>" + bad + "\nAfter.");
    EXPECT_TRUE(r.message.tool_calls.empty()) << bad;
    EXPECT_EQ(r.message.content, bad + "\nAfter.") << bad;
  }
  // Without declared tools at all, no call fits.
  OutputParser none({false, ojson::array()});
  std::vector<OutputDelta> d;
  none.feed(fits, d);
  none.finish(d);
  EXPECT_TRUE(none.message().tool_calls.empty());
  EXPECT_EQ(none.message().content, fits);
}

// A call opened inside the reasoning leaves the reasoning open: the </think> that follows still
// ends it, and nothing of the reasoning reaches the content.
TEST(OutputParser, ToolCallInsideReasoningKeepsTheSplit) {
  const Result r = parse_all_ways(
      "Let me look.\n<tool_call>\n<function=lookup>\n<parameter=id>\n3\n</parameter>\n</function>\n"
      "</tool_call>\nMore thought.\n</think>\n\nThe answer.");
  ASSERT_EQ(r.message.tool_calls.size(), 1u);
  EXPECT_EQ(r.message.reasoning_content, "Let me look.More thought.");
  EXPECT_EQ(r.message.content, "The answer.");
  // A cut or unfitting call inside the reasoning stays reasoning text.
  const Result cut = parse_all_ways("Hmm <tool_call>\n<function=lookup>\n<parameter=id>\n3");
  EXPECT_TRUE(cut.message.tool_calls.empty());
  EXPECT_EQ(cut.message.reasoning_content, "Hmm<tool_call>\n<function=lookup>\n<parameter=id>\n3");
  EXPECT_EQ(cut.message.content, "");
}

TEST(OutputParser, MalformedCallsBecomeContentOrAreTolerated) {
  // Not a call at all.
  Result r = parse_all_ways("r</think>\n\nUse <tool_call> tags like this.");
  EXPECT_EQ(r.message.content, "Use<tool_call> tags like this.");
  EXPECT_TRUE(r.message.tool_calls.empty());
  // Junk between calls is content, a call with stray text inside is text as written; missing
  // closers are tolerated.
  const std::string stray =
      "<tool_call>\n<function=get_weather>\nstray text\n<parameter=days>\n1\n</parameter>\n</tool_call>";
  r = parse_all_ways(
      "r</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=days>\n1\n<parameter=metric>\nfalse\n"
      "</function>\nsome junk\n" +
      stray + "\nDone.");
  ASSERT_EQ(r.message.tool_calls.size(), 1u);
  EXPECT_EQ(r.message.tool_calls[0].arguments, R"({"days":1,"metric":false})");
  EXPECT_EQ(r.message.content, "some junk" + stray + "\nDone.");
  // Qwen3-style JSON inside <tool_call>.
  r = parse_all_ways(
      "r</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
      "\"Rome\"}}\n</tool_call>");
  ASSERT_EQ(r.message.tool_calls.size(), 1u);
  EXPECT_EQ(r.message.tool_calls[0].arguments, R"({"location":"Rome"})");
  r = parse_all_ways("r</think>\n\n<tool_call>\n{not json}</tool_call> after");
  EXPECT_TRUE(r.message.tool_calls.empty());
  EXPECT_EQ(r.message.content, "<tool_call>\n{not json}</tool_call> after");
  // A call without parameters.
  r = parse_all_ways("<tool_call>\n<function=list_files>\n</function>\n</tool_call>");
  ASSERT_EQ(r.message.tool_calls.size(), 1u);
  EXPECT_EQ(r.message.tool_calls[0].arguments, "{}");
}

// Random mixes of tags, tag fragments, whitespace and text: never a crash, never lost text, and
// the same result however the text is chunked.
TEST(OutputParser, RandomOutputsAreChunkingInvariant) {
  const char* pieces[] = {"<think>",
                          "</think>",
                          "<tool_call>",
                          "</tool_call>",
                          "<function=get_weather>",
                          "<function=",
                          "</function>",
                          "<parameter=days>",
                          "<parameter=location>",
                          "<parameter=",
                          "</parameter>",
                          "<",
                          ">",
                          "</",
                          "\n",
                          "\n\n",
                          " ",
                          "\t",
                          "42",
                          "Paris",
                          "{\"a\": 1}",
                          "é",
                          "text",
                          "<tool",
                          "_call>",
                          "</think",
                          "{\"name\": \"f\", \"arguments\": {}}",
                          "null",
                          "true"};
  std::mt19937 rng(11);
  for (int round = 0; round < 3000; ++round) {
    std::string output;
    for (int i = 0, n = static_cast<int>(rng() % 30); i < n; ++i) output += pieces[rng() % std::size(pieces)];
    const bool reasoning = rng() % 2 == 0;
    const Result whole = parse_chunks({output}, reasoning);
    std::vector<std::string> chunks;
    for (size_t pos = 0; pos < output.size();) {
      const size_t n = std::min<size_t>(output.size() - pos, 1 + rng() % 5);
      chunks.push_back(output.substr(pos, n));
      pos += n;
    }
    const Result chunked = parse_chunks(chunks, reasoning);
    ASSERT_EQ(chunked.deltas, whole.deltas) << output;
    // Every non-space character of the output that is not markup survives somewhere.
    const ParsedMessage& m = whole.message;
    std::string kept = m.reasoning_content + m.content;
    for (const auto& call : m.tool_calls) kept += call.name + call.arguments;
    for (const char* word : {"Paris", "42", "text"}) {
      size_t in_output = 0, in_result = 0;
      for (size_t p = output.find(word); p != std::string::npos; p = output.find(word, p + 1)) ++in_output;
      for (size_t p = kept.find(word); p != std::string::npos; p = kept.find(word, p + 1)) ++in_result;
      EXPECT_EQ(in_result, in_output) << word << " in " << output;
    }
    for (const auto& call : m.tool_calls) EXPECT_TRUE(ojson::accept(call.arguments)) << call.arguments;
  }
}

TEST(OutputParser, EmitsAsSoonAsCertain) {
  OutputParser p({true, kTools});
  std::vector<OutputDelta> d;
  p.feed("Thinking hard", d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, "Thinking hard");
  d.clear();
  p.feed(" now\n</th", d);  // could be </think>: "\n</th" is held back
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].text, " now");
  d.clear();
  p.feed("ink>\n\nAnswer<tool", d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kind, Kind::kContent);
  EXPECT_EQ(d[0].text, "Answer");
  d.clear();
  p.feed("_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n", d);
  EXPECT_TRUE(d.empty());  // a call is held until it is complete
  p.feed("</function>", d);
  EXPECT_TRUE(d.empty());  // </tool_call> may follow
  p.feed("\n</tool_call>", d);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].kind, Kind::kToolCallStart);
  EXPECT_EQ(d[0].text, "get_weather");
  EXPECT_EQ(d[1].text, R"({"days":2)");
  EXPECT_EQ(d[2].text, "}");
}

// Options of a server request: no tools (or tool_choice "none") keeps tool-call markup as text;
// reasoning_format "none" keeps the think tags as text.
TEST(OutputParser, ToolCallsAndReasoningCanBeTurnedOff) {
  const std::string output =
      "Think.\n</think>\n\nSee <tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n"
      "</tool_call>";
  auto parse = [&](OutputParserOptions options, size_t step) {
    OutputParser parser(std::move(options));
    std::vector<OutputDelta> deltas;
    for (size_t pos = 0; pos < output.size(); pos += step) parser.feed(output.substr(pos, step), deltas);
    parser.finish(deltas);
    return parser.message();
  };
  for (size_t step : {size_t{1}, size_t{3}, output.size()}) {
    ParsedMessage m = parse({true, kTools, true, false}, step);
    EXPECT_EQ(m.reasoning_content, "Think.");
    EXPECT_EQ(m.content, output.substr(output.find("See")));
    EXPECT_TRUE(m.tool_calls.empty());
    m = parse({true, kTools, false, true}, step);
    EXPECT_EQ(m.reasoning_content, "");
    EXPECT_EQ(m.content, "Think.\n</think>\n\nSee");
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].arguments, R"({"a":"1"})");
    m = parse({false, kTools, false, false}, step);
    EXPECT_EQ(m.content, output);
  }
  auto whole = [](OutputParserOptions options, const std::string& text) {
    OutputParser parser(std::move(options));
    std::vector<OutputDelta> deltas;
    parser.feed(text, deltas);
    parser.finish(deltas);
    return parser.message();
  };
  // Without tools a <tool_call> inside the reasoning is reasoning text too.
  EXPECT_EQ(whole({true, kTools, true, false}, "a <tool_call> b").reasoning_content, "a <tool_call> b");
  // A leading <think> is text as well when reasoning is off.
  EXPECT_EQ(whole({false, kTools, false, true}, "<think>x</think>y").content, "<think>x</think>y");
}

TEST(ToolArguments, ConvertsByDeclaredType) {
  auto conv = [](const char* text, const char* schema) {
    const ojson s = ojson::parse(schema);
    return convert_parameter(text, &s).dump();
  };
  EXPECT_EQ(conv("42", R"({"type": "integer"})"), "42");
  EXPECT_EQ(conv(" -1.5e3 ", R"({"type": "number"})"), "-1500.0");
  EXPECT_EQ(conv("forty", R"({"type": "integer"})"), R"("forty")");
  EXPECT_EQ(conv("FALSE", R"({"type": "boolean"})"), "false");
  EXPECT_EQ(conv("yes", R"({"type": "boolean"})"), R"("yes")");
  EXPECT_EQ(conv("[1, 2]", R"({"type": "array"})"), "[1,2]");
  EXPECT_EQ(conv("[1, 2]", R"({"type": "object"})"), R"("[1, 2]")");
  EXPECT_EQ(conv("null", R"({"type": "string"})"), R"("null")");
  EXPECT_EQ(conv("null", R"({"type": "integer"})"), "null");
  EXPECT_EQ(conv(" 7 ", R"({"type": "string"})"), R"(" 7 ")");
  EXPECT_EQ(conv("3", R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})"), "3");
  EXPECT_EQ(conv("2", R"({"enum": [1, 2, 3]})"), "2");
  EXPECT_EQ(convert_parameter("5", nullptr).dump(), R"("5")");
  EXPECT_NE(find_parameter_schema(kTools, "get_weather", "days"), nullptr);
  EXPECT_EQ(find_parameter_schema(kTools, "get_weather", "nope"), nullptr);
  EXPECT_EQ(find_parameter_schema(kTools, "other", "days"), nullptr);
}

}  // namespace
}  // namespace qwick
