// The text files of a `qwick make-model` checkpoint, in the layout of the real ones:
// tokenizer.json (a byte-level BPE vocabulary the engine learns from a built-in text, with the 33
// Qwen3.5/3.6 added tokens, the Qwen3.5/3.6 split regex and NFC), tokenizer_config.json and
// chat_template.jinja (the real Qwen3.6 template). Nothing in the text path is special-cased for
// such a model: it loads through the same code as a real checkpoint.
//
// The model directory code (src/model) does not depend on the text library; `qwick make-model`
// and the built-in model call write_synthetic_text_files() after write_synthetic_model().
//
// Tested in tests/text/synthetic_tokenizer_test.cpp (ids and flags of the added tokens, round
// trips, vocabulary sizes for the presets, determinism) and tests/text/text_cli_test.cpp (a tiny
// model generating text end to end).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/added_tokens.h"

namespace qwick {

// The Qwen3.5/3.6 pre-tokenizer split (model-spec.md §5).
extern const std::string_view kQwen35SplitRegex;

// The 33 added tokens at ids base .. base+32 in Qwen3.5/3.6 order (<|endoftext|> = base,
// <|im_start|> = base+1, <|im_end|> = base+2, <tool_call> = base+14, <think> = base+24, ...).
std::vector<AddedToken> qwen_added_tokens(int32_t base);

// tokenizer.json text with `regular_tokens` BPE tokens (ids 0 .. regular_tokens-1) followed by
// the added tokens. Deterministic.
std::string synthetic_tokenizer_json(int32_t regular_tokens);

// Writes tokenizer.json, tokenizer_config.json and chat_template.jinja into `dir`. The added
// tokens start at `special_base` (model/synthetic_model.h special_token_base(vocab_size)).
void write_synthetic_text_files(const std::string& dir, int32_t special_base);

}  // namespace qwick
