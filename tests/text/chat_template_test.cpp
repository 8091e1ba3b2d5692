// Chat template: every golden of shared/reference/chat (copied to tests/fixtures/chat) rendered
// byte for byte, the template's errors with its messages, the deliberate handling of arguments
// sent as a JSON string, the Qwen3.5 variant's two differences, and template recognition.
#include <gtest/gtest.h>

#include "text/builtin_templates.h"
#include "text/chat_template.h"
#include "text_test_support.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

const ojson& goldens() {
  static const ojson g = test::read_json(std::string(QWICK_FIXTURES) + "/chat/goldens.json");
  return g;
}

ChatTemplateInput input_of(const ojson& c) {
  ChatTemplateInput in;
  in.messages = c["messages"];
  in.tools = c.value("tools", ojson());
  in.kwargs = c["kwargs"];
  in.add_generation_prompt = in.kwargs["add_generation_prompt"].get<bool>();
  in.kwargs.erase("add_generation_prompt");
  return in;
}

TEST(ChatTemplateGoldens, PromptsAreByteIdentical) {
  int checked = 0;
  for (const auto& c : goldens()["cases"]) {
    if (!c.contains("prompt")) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    EXPECT_EQ(render_chat_template(input_of(c)), c["prompt"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 28);
}

TEST(ChatTemplateGoldens, RejectionsCarryTheTemplatesMessage) {
  int checked = 0;
  for (const auto& c : goldens()["cases"]) {
    if (!c.contains("error") || c["error_kind"] != "raise_exception") continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    try {
      render_chat_template(input_of(c));
      ADD_FAILURE() << "rendered without error";
    } catch (const ChatTemplateError& e) {
      EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

// The template fails on arguments given as a JSON string (the golden records jinja's TypeError);
// the engine parses them first, so they render exactly like the object form.
TEST(ChatTemplateGoldens, ArgumentsAsJsonStringAreParsedFirst) {
  const ojson* found = nullptr;
  for (const auto& c : goldens()["cases"])
    if (c["name"] == "error_arguments_as_json_string") found = &c;
  ASSERT_NE(found, nullptr);
  const ChatTemplateInput as_string = input_of(*found);
  ChatTemplateInput as_object = as_string;
  auto& args = as_object.messages[1]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_string());
  args = ojson::parse(args.get<std::string>());
  const std::string prompt = render_chat_template(as_string);
  EXPECT_EQ(prompt, render_chat_template(as_object));
  EXPECT_NE(prompt.find("<function=get_weather>\n<parameter=location>\nOslo\n</parameter>\n</function>"),
            std::string::npos);

  args = "{not json";
  as_object.messages[1]["tool_calls"][0]["function"]["arguments"] = "{not json";
  EXPECT_THROW(render_chat_template(as_object), ChatTemplateError);
}

TEST(ChatTemplate, TypeErrorsOfTheTemplateAreErrorsToo) {
  ChatTemplateInput in;
  in.messages = ojson::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": 5, "arguments": {}}}]}])");
  EXPECT_THROW(render_chat_template(in), ChatTemplateError);
  in.messages = ojson::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}])");
  EXPECT_THROW(render_chat_template(in), ChatTemplateError);
  in.messages = ojson::parse(R"([{"role": "user", "content": [5]}])");
  EXPECT_THROW(render_chat_template(in), ChatTemplateError);
  in.messages = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  in.tools = "get_weather";
  EXPECT_THROW(render_chat_template(in), ChatTemplateError);
  // What the template ignores: tools given as a mapping, tool_calls given as a mapping or a number.
  in.tools = ojson::parse(R"({"name": "f"})");
  EXPECT_EQ(render_chat_template(in), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  in.tools = nullptr;
  in.messages = ojson::parse(
      R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a", "tool_calls": {}},
      {"role": "assistant", "content": "b", "tool_calls": 3}])");
  in.add_generation_prompt = false;
  EXPECT_EQ(render_chat_template(in),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nb<|im_end|>\n");
}

TEST(ChatTemplate, VisionPartsAndIds) {
  ChatTemplateInput in;
  in.messages = ojson::parse(R"([{"role": "user", "content": [{"type": "image", "image": "a.png"},
      {"type": "text", "text": "and"}, {"type": "video_url", "video": "b.mp4"}, {"type": "image_url", "image_url": {}}]}])");
  in.add_generation_prompt = false;
  EXPECT_EQ(
      render_chat_template(in),
      "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>and"
      "<|vision_start|><|video_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|><|im_end|>\n");
  in.kwargs["add_vision_id"] = true;
  EXPECT_EQ(render_chat_template(in),
            "<|im_start|>user\nPicture 1: <|vision_start|><|image_pad|><|vision_end|>and"
            "Video 1: <|vision_start|><|video_pad|><|vision_end|>Picture 2: "
            "<|vision_start|><|image_pad|><|vision_end|>"
            "<|im_end|>\n");
}

// Qwen3.5: no preserve_thinking, and scalar arguments through Python's str().
TEST(ChatTemplate, Qwen35Variant) {
  ChatTemplateInput in;
  in.messages = ojson::parse(R"([{"role": "user", "content": "go"},
      {"role": "assistant", "reasoning_content": "r", "content": "",
       "tool_calls": [{"function": {"name": "f", "arguments": {"a": true, "b": null, "c": 2.5, "d": [1, "x"], "e": "s"}}}]},
      {"role": "user", "content": "again"}])");
  in.kwargs["preserve_thinking"] = true;
  in.add_generation_prompt = false;
  const std::string expected_calls =
      "<tool_call>\n<function=f>\n<parameter=a>\n{A}\n</parameter>\n<parameter=b>\n{B}\n</parameter>\n"
      "<parameter=c>\n2.5\n</parameter>\n<parameter=d>\n[1, "
      "\"x\"]\n</parameter>\n<parameter=e>\ns\n</parameter>\n"
      "</function>\n</tool_call><|im_end|>\n";
  auto with = [&](std::string s, const std::string& a, const std::string& b) {
    s.replace(s.find("{A}"), 3, a);
    s.replace(s.find("{B}"), 3, b);
    return s;
  };
  const std::string head = "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n";
  const std::string tail = "<|im_start|>user\nagain<|im_end|>\n";
  EXPECT_EQ(render_chat_template(in, ChatTemplateKind::kQwen36),
            head + "<think>\nr\n</think>\n\n" + with(expected_calls, "true", "null") + tail);
  EXPECT_EQ(render_chat_template(in, ChatTemplateKind::kQwen35),
            head + with(expected_calls, "True", "None") + tail);
}

TEST(ChatTemplate, RecognisesTheKnownTemplates) {
  EXPECT_EQ(recognise_chat_template(qwen36_chat_template()), ChatTemplateKind::kQwen36);
  EXPECT_EQ(recognise_chat_template(std::string(qwen36_chat_template()) + "\n"), ChatTemplateKind::kQwen36);
  EXPECT_EQ(recognise_chat_template(qwen35_chat_template()), ChatTemplateKind::kQwen35);
  EXPECT_EQ(qwen36_chat_template().size(), 7764u);  // SOURCES.md: 7764 bytes, sha256 e84f32a2...
  EXPECT_EQ(qwen35_chat_template().size(), 7756u);
  std::string edited(qwen36_chat_template());
  edited[100] = ' ';
  EXPECT_FALSE(recognise_chat_template(edited).has_value());
}

}  // namespace
}  // namespace qwick
