// The text side of a model directory for the CLI: its tokenizer and which chat template it ships.
// Tested through the commands in tests/text/text_cli_test.cpp.
#pragma once

#include <string>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace qwick {

struct ModelText {
  Tokenizer tokenizer;
  ChatTemplateKind template_kind = ChatTemplateKind::kQwen36;
};

// Reads DIR/tokenizer.json and recognises DIR/chat_template.jinja (else tokenizer_config.json's
// chat_template). A missing or unknown template gets a warning on stderr and the Qwen3.6 format.
ModelText load_model_text(const std::string& dir);

// The template kind of a chat_template.jinja file; Error if it is not one the engine knows.
ChatTemplateKind chat_template_kind_of_file(const std::string& path);

// The tokenizer path for the text commands: --tokenizer when given, else the model directory
// (-m), else the built-in model.
std::string tokenizer_location(const std::string& tokenizer, const std::string& model);

}  // namespace qwick
