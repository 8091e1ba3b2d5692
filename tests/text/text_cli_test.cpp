// The text commands end to end through the qwick binary: make-model's text files, tokenize /
// detokenize against the goldens, template against the chat goldens (prompts and rejections),
// run with a text prompt (checked against the same generation from token ids) and chat on a pipe.
#include <gtest/gtest.h>

#include <regex>

#include "text/tokenizer.h"
#include "text_test_support.h"

namespace qwick {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

// A tiny random-weight model with its text files, made once per test.
fs::path tiny_model(const fs::path& scratch) {
  const fs::path dir = scratch / "tiny";
  const test::Run r = test::run_qwick(scratch, "make-model --preset tiny '" + dir.string() + "'");
  EXPECT_EQ(r.status, 0) << r.err;
  return dir;
}

TEST(TextCli, MakeModelWritesTheTextFilesOfARealCheckpoint) {
  const fs::path scratch = test::scratch_dir("make_model");
  const fs::path dir = tiny_model(scratch);
  for (const char* f :
       {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  const Tokenizer t = Tokenizer::from_file(dir.string());
  const ojson generation = test::read_json((dir / "generation_config.json").string());
  const ojson config = test::read_json((dir / "config.json").string());
  // The stop ids the engine reads are the tokenizer's <|im_end|> and <|endoftext|>.
  EXPECT_EQ(generation["eos_token_id"][0].get<int32_t>(), *t.added_token_id("<|im_end|>"));
  EXPECT_EQ(generation["eos_token_id"][1].get<int32_t>(), *t.added_token_id("<|endoftext|>"));
  EXPECT_EQ(t.id_limit(), config["text_config"]["vocab_size"].get<int32_t>());
  const ojson tc = test::read_json((dir / "tokenizer_config.json").string());
  EXPECT_EQ(tc["eos_token"], "<|im_end|>");
  EXPECT_EQ(tc["added_tokens_decoder"][std::to_string(*t.added_token_id("<think>"))]["content"], "<think>");
}

TEST(TextCli, TokenizeAndDetokenizeMatchTheGoldens) {
  const fs::path scratch = test::scratch_dir("tokenize");
  const ojson goldens = test::read_json(std::string(QWICK_FIXTURES) + "/tokenizer/goldens.json");
  std::string jsonl, expected;
  for (const auto& c : goldens["cases"]) {
    if (c["tokenizer"] != "qwen35-regex") continue;
    jsonl += c["text"].dump() + "\n";
    expected += c["ids"].dump() + "\n";
  }
  const std::string file = test::tokenizer_fixture("qwen35-regex");
  test::Run r = test::run_qwick(scratch, "tokenize --special --jsonl --tokenizer '" + file + "'", jsonl);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, expected);

  // Plain mode: stdin is the text; a directory works as well as the file.
  const auto& chat = goldens["cases"][26];
  ASSERT_EQ(chat["name"], "special_tokens_chat");
  const fs::path tok_dir = fs::path(file).parent_path();
  r = test::run_qwick(scratch, "tokenize --special --tokenizer '" + tok_dir.string() + "'", chat["text"]);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(ojson::parse(r.out), chat["ids"]);
  r = test::run_qwick(scratch, "detokenize --tokenizer '" + file + "'", chat["ids"].dump());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, chat["decoded"].get<std::string>());
  r = test::run_qwick(scratch, "detokenize --skip-special --tokenizer '" + file + "'", "151644, 9707 151645");
  EXPECT_EQ(r.out, "Hello");
  // Without --special, <|im_start|> is text.
  r = test::run_qwick(scratch, "tokenize --tokenizer '" + file + "'", "<|im_start|>");
  EXPECT_EQ(r.out.find("151644"), std::string::npos) << r.out;
  r = test::run_qwick(scratch, "detokenize --tokenizer '" + file + "'", "[1, 999999]");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("token id 999999 is not in the tokenizer"), std::string::npos) << r.err;
  r = test::run_qwick(scratch, "tokenize --tokenizer '" + file + "'", "bad \xFF byte");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not valid UTF-8 (byte offset 4)"), std::string::npos) << r.err;
}

TEST(TextCli, TemplateRendersTheGoldensAndRejectsWithTheReason) {
  const fs::path scratch = test::scratch_dir("template");
  const ojson goldens = test::read_json(std::string(QWICK_FIXTURES) + "/chat/goldens.json");
  std::string jsonl;
  std::vector<const ojson*> cases;
  for (const auto& c : goldens["cases"]) {
    if (c.value("error_kind", "") == "TypeError") continue;  // parsed on purpose, see chat_template_test
    ojson request = {{"messages", c["messages"]},
                     {"add_generation_prompt", c["kwargs"]["add_generation_prompt"]}};
    if (c.contains("tools")) request["tools"] = c["tools"];
    ojson kwargs = c["kwargs"];
    kwargs.erase("add_generation_prompt");
    request["chat_template_kwargs"] = kwargs;
    jsonl += request.dump() + "\n";
    cases.push_back(&c);
  }
  const test::Run r = test::run_qwick(scratch, "template --jsonl", jsonl);
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  size_t i = 0;
  for (; std::getline(lines, line) && i < cases.size(); ++i) {
    const ojson& c = *cases[i];
    SCOPED_TRACE(c["name"].get<std::string>());
    const ojson got = ojson::parse(line);
    if (c.contains("prompt"))
      EXPECT_EQ(got.value("prompt", ""), c["prompt"].get<std::string>());
    else
      EXPECT_EQ(got.value("error", ""), c["error"].get<std::string>());
  }
  EXPECT_EQ(i, cases.size());

  // Single-request mode: the prompt exactly, or status 1 and the reason.
  test::Run one =
      test::run_qwick(scratch, "template", R"({"messages": [{"role": "user", "content": " hi "}]})");
  EXPECT_EQ(one.status, 0);
  EXPECT_EQ(one.out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  one = test::run_qwick(scratch, "template", R"({"messages": [{"role": "assistant", "content": "x"}]})");
  EXPECT_EQ(one.status, 1);
  EXPECT_EQ(one.out, "");
  EXPECT_NE(one.err.find("No user query found in messages."), std::string::npos) << one.err;
  // The Qwen3.5 template's rules on request.
  one = test::run_qwick(
      scratch,
      "template --chat-template '" + std::string(QWICK_TEXT_RESOURCES) + "/qwen3.5-chat_template.jinja'",
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "",
                            "tool_calls": [{"function": {"name": "f", "arguments": {"b": true}}}]}],
                            "add_generation_prompt": false})");
  EXPECT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find("<parameter=b>\nTrue\n</parameter>"), std::string::npos) << one.out;
}

TEST(TextCli, RunWithATextPromptIsTheSameGenerationAsWithItsIds) {
  const fs::path scratch = test::scratch_dir("run");
  const fs::path model = tiny_model(scratch);
  const std::string m = "-m '" + model.string() + "' ";
  test::Run text = test::run_qwick(scratch, "run " + m + "-p 'Hello there' -n 12 --ignore-eos");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.err.find("prompt eval time"), std::string::npos);

  // The same prompt through template + tokenize, generated from ids, detokenized.
  const test::Run prompt =
      test::run_qwick(scratch, "template", R"({"messages": [{"role": "user", "content": "Hello there"}],
      "chat_template_kwargs": {"enable_thinking": true}})");
  const test::Run ids = test::run_qwick(scratch, "tokenize --special " + m, prompt.out);
  const test::Run generated =
      test::run_qwick(scratch, "run " + m + "--prompt-ids '" + ids.out.substr(0, ids.out.size() - 1) +
                                   "' -n 12 --ignore-eos");
  ASSERT_EQ(generated.status, 0) << generated.err;
  const test::Run detok = test::run_qwick(scratch, "detokenize " + m, generated.out);
  EXPECT_EQ(text.out, detok.out + "\n");

  // --raw and -f: the file's text is the whole prompt.
  test::write_file(scratch / "prompt.txt",
                   "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\n");
  const test::Run raw = test::run_qwick(
      scratch, "run " + m + "--raw -f '" + (scratch / "prompt.txt").string() + "' -n 12 --ignore-eos");
  ASSERT_EQ(raw.status, 0) << raw.err;
  EXPECT_EQ(raw.out, text.out);
  const test::Run both = test::run_qwick(scratch, "run " + m + "-p x --prompt-ids 1");
  EXPECT_EQ(both.status, 1);
}

TEST(TextCli, ChatRunsOnAPipe) {
  const fs::path scratch = test::scratch_dir("chat");
  const fs::path model = tiny_model(scratch);
  const test::Run r =
      test::run_qwick(scratch, "chat --preserve-thinking -m '" + model.string() + "' -n 6 --temp 0",
                      "Hello!\nHow are you?\n/reset\nAgain\n/exit\nignored\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("(conversation cleared)"), std::string::npos) << r.err;
  // Three replies, each ending in a newline; no prompt characters or colours on a pipe.
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n') >= 3, true)
      << r.err;  // "cut at the token limit" x3 + cleared
  // Reasoning is framed on a pipe, hidden with --hide-reasoning.
  EXPECT_NE(r.out.find("<think>\n"), std::string::npos) << r.out;
  const test::Run hidden = test::run_qwick(
      scratch, "chat --hide-reasoning --no-think -m '" + model.string() + "' -n 6", "Hello!\n");
  ASSERT_EQ(hidden.status, 0) << hidden.err;
  EXPECT_EQ(hidden.out.find("<think>\n"), std::string::npos) << hidden.out;
}

}  // namespace
}  // namespace qwick
