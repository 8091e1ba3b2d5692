#include "cli/model_text.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/engine_options.h"
#include "core/error.h"

namespace qwick {
namespace {

std::optional<std::string> read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ModelText load_model_text(const std::string& dir) {
  const std::filesystem::path root(dir);
  if (!std::filesystem::exists(root / "tokenizer.json"))
    fail("{}: no tokenizer.json (give the prompt as token ids with --prompt-ids instead)", dir);
  ModelText text{Tokenizer::from_file((root / "tokenizer.json").string()), ChatTemplateKind::kQwen36};
  std::optional<std::string> tmpl = read_text(root / "chat_template.jinja");
  if (!tmpl) {
    if (const auto config = read_text(root / "tokenizer_config.json")) {
      const auto j = nlohmann::json::parse(*config, nullptr, false);
      if (j.is_object() && j.contains("chat_template") && j["chat_template"].is_string())
        tmpl = j["chat_template"];
    }
  }
  const auto kind = tmpl ? recognise_chat_template(*tmpl) : std::nullopt;
  if (kind)
    text.template_kind = *kind;
  else
    std::fprintf(stderr, "warning: %s: %s; formatting chats as Qwen3.6 does\n", dir.c_str(),
                 tmpl ? "the chat template is not the Qwen3.6 or Qwen3.5 one" : "no chat template");
  return text;
}

ChatTemplateKind chat_template_kind_of_file(const std::string& path) {
  const auto text = read_text(path);
  if (!text) fail("cannot read {}", path);
  const auto kind = recognise_chat_template(*text);
  if (!kind) fail("{}: not a chat template this engine knows (the Qwen3.6 and Qwen3.5 ones)", path);
  return *kind;
}

std::string tokenizer_location(const std::string& tokenizer, const std::string& model) {
  return tokenizer.empty() ? model_dir_or_builtin(model) : tokenizer;
}

}  // namespace qwick
