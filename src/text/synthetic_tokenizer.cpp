#include "text/synthetic_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/bpe_builder.h"
#include "text/builtin_templates.h"

namespace qwick {

const std::string_view kQwen35SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

struct AddedSpec {
  const char* content;
  bool special;
};

// model-spec.md §5, in id order. <think>, <tool_call>, the FIM and repo tokens are not special
// (they stay in decoded text), the chat, vision and audio tokens are.
constexpr AddedSpec kAdded[] = {
    {"<|endoftext|>", true},      {"<|im_start|>", true},
    {"<|im_end|>", true},         {"<|object_ref_start|>", true},
    {"<|object_ref_end|>", true}, {"<|box_start|>", true},
    {"<|box_end|>", true},        {"<|quad_start|>", true},
    {"<|quad_end|>", true},       {"<|vision_start|>", true},
    {"<|vision_end|>", true},     {"<|vision_pad|>", true},
    {"<|image_pad|>", true},      {"<|video_pad|>", true},
    {"<tool_call>", false},       {"</tool_call>", false},
    {"<|fim_prefix|>", false},    {"<|fim_middle|>", false},
    {"<|fim_suffix|>", false},    {"<|fim_pad|>", false},
    {"<|repo_name|>", false},     {"<|file_sep|>", false},
    {"<tool_response>", false},   {"</tool_response>", false},
    {"<think>", false},           {"</think>", false},
    {"<|audio_start|>", true},    {"<|audio_end|>", true},
    {"<tts_pad>", true},          {"<tts_text_bos>", true},
    {"<tts_text_eod>", true},     {"<tts_text_bos_single>", true},
    {"<|audio_pad|>", true},
};

// The training text: sentences drawn (by a fixed seed) from a small vocabulary of English, code,
// numbers, punctuation and a few other scripts, so merges look like a real tokenizer's.
std::string training_text() {
  static const char* const kWords[] = {
      "the",      "of",       "and",       "to",      "a",          "in",         "is",         "that",
      "for",      "it",       "as",        "with",    "was",        "on",         "be",         "by",
      "this",     "are",      "or",        "from",    "at",         "an",         "which",      "have",
      "not",      "can",      "but",       "all",     "one",        "more",       "when",       "there",
      "their",    "what",     "so",        "if",      "about",      "would",      "into",       "time",
      "only",     "some",     "could",     "them",    "other",      "than",       "then",       "now",
      "like",     "also",     "new",       "just",    "first",      "any",        "these",      "two",
      "how",      "our",      "may",       "well",    "way",        "even",       "because",    "each",
      "most",     "us",       "people",    "after",   "where",      "model",      "token",      "tokens",
      "layer",    "layers",   "weight",    "weights", "expert",     "experts",    "attention",  "state",
      "memory",   "compute",  "prompt",    "answer",  "question",   "reason",     "reasoning",  "think",
      "thinking", "user",     "assistant", "system",  "tool",       "function",   "parameter",  "call",
      "result",   "response", "message",   "weather", "city",       "today",      "tomorrow",   "temperature",
      "search",   "file",     "files",     "list",    "write",      "read",       "number",     "value",
      "string",   "integer",  "boolean",   "object",  "array",      "true",       "false",      "null",
      "none",     "return",   "def",       "class",   "import",     "const",      "auto",       "int",
      "float",    "void",     "struct",    "include", "std",        "vector",     "size_t",     "for",
      "while",    "break",    "print",     "self",    "len",        "range",      "json",       "http",
      "server",   "hello",    "world",     "good",    "morning",    "thanks",     "please",     "yes",
      "no",       "maybe",    "help",      "plan",    "trip",       "Paris",      "London",     "Tokyo",
      "Berlin",   "Lisbon",   "Qwen",      "engine",  "fast",       "slow",       "small",      "large",
      "café",     "naïve",    "über",      "straße",  "niño",       "привет",     "мир",        "γειά",
      "你好",     "世界",     "天气",      "谢谢",    "こんにちは", "ありがとう", "안녕하세요", "مرحبا",
      "नमस्ते",     "🙂",     "🚀",
  };
  static const char* const kJoins[] = {" ",  " ",   " ", " ", ", ", ". ",  "\n",  "\n\n", ": ", " (",
                                       ") ", " = ", "(", ")", "; ", " - ", "'s ", "n't ", "\t", "    "};
  std::mt19937 rng(20250601);
  std::string text;
  const size_t n_words = std::size(kWords), n_joins = std::size(kJoins);
  while (text.size() < 160000) {
    const int r = static_cast<int>(rng() % 100);
    if (r < 4) {
      text += std::to_string(rng() % 100000);
    } else {
      std::string word = kWords[rng() % n_words];
      if (r < 14 && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
    }
    text += kJoins[rng() % n_joins];
  }
  return text;
}

// Written under a temporary name and renamed, so a concurrent reader never sees half a file.
void write_file(const std::filesystem::path& path, std::string_view text) {
  const std::filesystem::path temp = path.string() + ".partial";
  {
    std::ofstream out(temp, std::ios::binary);
    out << text;
    if (!out.flush()) fail("cannot write {}", temp.string());
  }
  std::error_code error;
  std::filesystem::rename(temp, path, error);
  if (error) fail("cannot write {}: {}", path.string(), error.message());
}

}  // namespace

std::vector<AddedToken> qwen_added_tokens(int32_t base) {
  std::vector<AddedToken> tokens;
  for (const auto& a : kAdded)
    tokens.push_back({base + static_cast<int32_t>(tokens.size()), a.content, a.special});
  return tokens;
}

std::string synthetic_tokenizer_json(int32_t regular_tokens) {
  if (regular_tokens < 256 + 26)
    fail("a byte-level vocabulary needs at least 282 regular tokens, the model has {}", regular_tokens);
  const PreTokenizer split =
      PreTokenizer::from_json({{"type", "Split"},
                               {"pattern", {{"Regex", std::string(kQwen35SplitRegex)}}},
                               {"behavior", "Isolated"}});
  BpeVocabulary v = learn_bpe(training_text(), split, static_cast<size_t>(regular_tokens));
  extend_bpe(v, static_cast<size_t>(regular_tokens));
  return bpe_tokenizer_json(v, qwen_added_tokens(regular_tokens), kQwen35SplitRegex);
}

void write_synthetic_text_files(const std::string& dir, int32_t special_base) {
  const std::filesystem::path out(dir);
  std::filesystem::create_directories(out);
  write_file(out / "tokenizer.json", synthetic_tokenizer_json(special_base));

  nlohmann::ordered_json config;
  config["add_bos_token"] = false;
  config["add_prefix_space"] = false;
  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  for (const AddedToken& t : qwen_added_tokens(special_base))
    decoder[std::to_string(t.id)] = {{"content", t.content}, {"lstrip", false},      {"normalized", false},
                                     {"rstrip", false},      {"single_word", false}, {"special", t.special}};
  config["added_tokens_decoder"] = decoder;
  config["bos_token"] = nullptr;
  config["clean_up_tokenization_spaces"] = false;
  config["eos_token"] = "<|im_end|>";
  config["errors"] = "replace";
  config["model_max_length"] = 262144;
  config["pad_token"] = "<|endoftext|>";
  config["split_special_tokens"] = false;
  config["tokenizer_class"] = "Qwen2Tokenizer";
  config["unk_token"] = nullptr;
  write_file(out / "tokenizer_config.json", config.dump(2) + "\n");
  write_file(out / "chat_template.jinja", qwen36_chat_template());
}

}  // namespace qwick
