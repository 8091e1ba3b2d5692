#include "text/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "text/regex_unicode_table.h"

namespace qwick {
namespace {

// The split GPT-2 and ByteLevel{use_regex: true} use.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The pattern as the reference reads it. Hugging Face tokenizers runs it with Oniguruma, whose
// Unicode tables are newer than Debian's PCRE2 and whose \s is the White_Space property (PCRE2's
// also matches U+180E). So \s and \S become \p{White_Space} and \P{White_Space}, and \p{L},
// \p{M}, \p{N} (and \pL, ...) get the code points of later Unicode versions added
// (regex_unicode_table.h): inside a class as extra items, outside as a class of their own.
// Everything else, \Q...\E quoting included, is copied as it is.
std::string for_reference_unicode(const std::string& pattern) {
  auto extra = [](char category) -> const char* {
    return category == 'L'   ? kRegexExtraL
           : category == 'M' ? kRegexExtraM
           : category == 'N' ? kRegexExtraN
                             : nullptr;
  };
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);  // a literal ']'
      continue;
    }
    if (c == '[' && in_class && i + 1 < pattern.size() && pattern[i + 1] == ':') {  // [:alpha:]
      const size_t end = pattern.find(":]", i + 2);
      const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
      out += pattern.substr(i, stop - i);
      i = stop - 1;
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    if (c != '\\' || i + 1 >= pattern.size()) {
      out.push_back(c);
      continue;
    }
    const char next = pattern[++i];
    if (next == 's' || next == 'S') {
      out += next == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
    } else if (next == 'Q') {
      const size_t end = pattern.find("\\E", i);
      const size_t stop = end == std::string::npos ? pattern.size() : end + 2;
      out += pattern.substr(i - 1, stop - (i - 1));
      i = stop - 1;
    } else if ((next == 'p' || next == 'P') && i + 1 < pattern.size()) {
      // \pL or \p{Name}; `last` is the escape's last character.
      size_t last = i + 1;
      std::string name(1, pattern[i + 1]);
      if (pattern[i + 1] == '{') {
        last = std::min(pattern.find('}', i + 2), pattern.size() - 1);
        name = pattern.substr(i + 2, last - (i + 2));
      }
      const char* more = name.size() == 1 ? extra(name[0]) : nullptr;
      const std::string item = "\\p{" + name + "}" + (more ? more : "");
      if (more != nullptr && next == 'p')
        out += in_class ? item : "[" + item + "]";
      else if (more != nullptr && !in_class)
        out += "[^" + item + "]";
      else
        out += pattern.substr(i - 1, last - i + 2);  // another property, or \P{..} inside a class
      i = last;
    } else {
      out.push_back('\\');
      out.push_back(next);
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, bool literal) : impl_(std::make_unique<Impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  const std::string compiled = literal ? pattern : for_reference_unicode(pattern);
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options, &error,
                              &offset, nullptr);
  if (impl_->code == nullptr)
    fail("cannot compile the split regex at offset {}: {} (pattern: {})", offset, pcre2_message(error),
         pattern);
  // Without JIT (a platform PCRE2 lacks it for) matching still works, only slower.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::split_isolated(std::string_view text, std::vector<std::string_view>& out) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
  if (!match) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
  size_t gap_start = 0, pos = 0;
  while (pos <= text.size()) {
    const int rc =
        impl_->jit
            ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, match.get(), nullptr)
            : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("pre-tokenizer regex failed: {}", pcre2_message(rc));
    const size_t begin = ovector[0], end = ovector[1];
    if (begin > gap_start) out.push_back(text.substr(gap_start, begin - gap_start));
    if (end > begin) {
      out.push_back(text.substr(begin, end - begin));
      pos = end;
    } else {
      // An empty match cuts nothing; step over one character so the search moves on.
      if (begin >= text.size()) break;
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    gap_start = end;
  }
  if (gap_start < text.size()) out.push_back(text.substr(gap_start));
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config) {
  PreTokenizer p;
  if (config.is_null()) return p;
  std::vector<nlohmann::json> steps;
  const std::string type = config.value("type", "");
  if (type == "Sequence") {
    if (!config.contains("pretokenizers") || !config["pretokenizers"].is_array())
      fail("pre_tokenizer Sequence without a \"pretokenizers\" array");
    for (const auto& s : config["pretokenizers"]) steps.push_back(s);
  } else {
    steps.push_back(config);
  }
  for (const auto& step : steps) {
    const std::string kind = step.value("type", "");
    if (kind == "Split") {
      const std::string behavior = step.value("behavior", "");
      if (behavior != "Isolated")
        fail("Split behavior \"{}\" is not supported (supported: Isolated)", behavior);
      if (step.value("invert", false)) fail("Split with invert=true is not supported");
      const auto& pattern = step.contains("pattern") ? step["pattern"] : nlohmann::json();
      if (pattern.contains("Regex") && pattern["Regex"].is_string())
        p.steps_.emplace_back(pattern["Regex"].get<std::string>(), false);
      else if (pattern.contains("String") && pattern["String"].is_string())
        p.steps_.emplace_back(pattern["String"].get<std::string>(), true);
      else
        fail("Split pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}, got {}", pattern.dump());
    } else if (kind == "ByteLevel") {
      if (step.value("add_prefix_space", false))
        fail("ByteLevel with add_prefix_space=true is not supported");
      if (step.value("use_regex", true)) p.steps_.emplace_back(kGpt2Pattern, false);
    } else {
      fail("pre-tokenizer type \"{}\" is not supported (supported: Split, ByteLevel, Sequence)", kind);
    }
  }
  return p;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  pieces.clear();
  if (text.empty()) return;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const Regex& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) step.split_isolated(piece, next);
    pieces.swap(next);
  }
}

}  // namespace qwick
