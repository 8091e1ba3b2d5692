#include "text/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/utf8.h"

namespace qwick {
namespace {

// The post-processor may only be one that adds nothing around the ids.
void check_post_processor(const nlohmann::json& p) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array() &&
      p["single"].size() == 1 && p["single"][0].contains("Sequence"))
    return;
  fail("post_processor {} adds tokens; that is not supported", p.dump());
}

void check_decoder(const nlohmann::json& d) {
  if (d.is_null()) return;
  const std::string type = d.value("type", "");
  if (type != "ByteLevel") fail("decoder type \"{}\" is not supported (supported: ByteLevel)", type);
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::filesystem::path file(path);
  if (std::filesystem::is_directory(file)) file /= "tokenizer.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("cannot read {}", file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), file.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  try {
    Tokenizer t;
    t.model_ = std::make_unique<BpeModel>(BpeModel::from_json(j.value("model", nlohmann::json())));
    t.normalizer_ = Normalizer::from_json(j.value("normalizer", nlohmann::json()));
    t.pre_tokenizer_ =
        std::make_shared<PreTokenizer>(PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json())));
    check_post_processor(j.value("post_processor", nlohmann::json()));
    check_decoder(j.value("decoder", nlohmann::json()));

    std::vector<AddedToken> added;
    for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
      if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        fail("malformed added token {}", a.dump());
      for (const char* option : {"lstrip", "rstrip", "single_word"})
        if (a.value(option, false))
          fail("added token \"{}\" has {}=true, which is not supported", a["content"].get<std::string>(),
               option);
      added.push_back({a["id"].get<int32_t>(), a["content"].get<std::string>(), a.value("special", false)});
      if (added.back().id < 0) fail("added token with negative id {}", added.back().id);
    }
    t.id_limit_ = t.model_->id_limit();
    for (const auto& a : added) t.id_limit_ = std::max(t.id_limit_, a.id + 1);
    t.added_index_.assign(static_cast<size_t>(t.id_limit_), -1);
    for (size_t i = 0; i < added.size(); ++i)
      t.added_index_[static_cast<size_t>(added[i].id)] = static_cast<int32_t>(i);
    t.added_ = std::make_unique<AddedTokenMatcher>(std::move(added));
    return t;
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong JSON type
    fail("{}: {}", source, e.what());
  }
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out, size_t limit) const {
  if (text.empty()) return;
  std::string normalized_storage;
  const std::string_view normalized = normalizer_.apply(text, normalized_storage);
  std::vector<std::string_view> pieces;
  pre_tokenizer_->split(normalized, pieces);
  for (std::string_view piece : pieces) {
    if (out.size() > limit) return;
    model_->encode(piece, out);
  }
}

void Tokenizer::encode(std::string_view text, bool parse_special, std::vector<int32_t>& out,
                       size_t limit) const {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail("the text to tokenize is not valid UTF-8 (byte offset {})", bad);
  size_t pos = 0;
  while (pos < text.size() && out.size() <= limit) {
    const AddedTokenMatcher::Match m = added_->find(text, pos, parse_special);
    if (m.token == nullptr) {
      encode_ordinary(text.substr(pos), out, limit);
      break;
    }
    encode_ordinary(text.substr(pos, m.begin - pos), out, limit);
    out.push_back(m.token->id);
    pos = m.begin + m.length;
  }
}

std::vector<int32_t> Tokenizer::encode_with_plain_ranges(std::string_view text,
                                                         std::span<const std::pair<size_t, size_t>> plain,
                                                         size_t limit) const {
  if (const size_t bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail("the text to tokenize is not valid UTF-8 (byte offset {})", bad);
  std::vector<int32_t> out;
  auto range = plain.begin();
  size_t segment = 0, from = 0;  // the ordinary text not encoded yet starts at `segment`
  while (from < text.size() && out.size() <= limit) {
    const AddedTokenMatcher::Match m = added_->find(text, from, true);
    if (m.token == nullptr) break;
    while (range != plain.end() && range->second <= m.begin) ++range;
    if (m.token->special && range != plain.end() && range->first <= m.begin) {
      from = m.begin + 1;  // inside a plain range: part of the ordinary text
      continue;
    }
    encode_ordinary(text.substr(segment, m.begin - segment), out, limit);
    out.push_back(m.token->id);
    segment = from = m.begin + m.length;
  }
  if (out.size() <= limit) encode_ordinary(text.substr(segment), out, limit);
  return out;
}

std::vector<std::string> Tokenizer::pieces(std::string_view text, bool parse_special) const {
  if (!is_valid_utf8(text)) fail("the text to tokenize is not valid UTF-8");
  std::vector<std::string> out;
  std::vector<std::string_view> cut;
  auto ordinary = [&](std::string_view segment) {
    std::string storage;
    pre_tokenizer_->split(normalizer_.apply(segment, storage), cut);
    for (std::string_view piece : cut) out.emplace_back(piece);
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokenMatcher::Match m = added_->find(text, pos, parse_special);
    if (m.token == nullptr) {
      ordinary(text.substr(pos));
      break;
    }
    ordinary(text.substr(pos, m.begin - pos));
    out.push_back(m.token->content);
    pos = m.begin + m.length;
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  encode(text, parse_special, ids);
  return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= id_limit_) return {};
  if (const int32_t a = added_index_[static_cast<size_t>(id)]; a >= 0)
    return added_->tokens()[static_cast<size_t>(a)].content;
  return model_->token_bytes(id);
}

bool Tokenizer::has_token(int32_t id) const {
  return !token_bytes(id).empty();
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= id_limit_) return false;
  const int32_t a = added_index_[static_cast<size_t>(id)];
  return a >= 0 && added_->tokens()[static_cast<size_t>(a)].special;
}

bool Tokenizer::is_control(int32_t id) const {
  if (id < 0 || id >= id_limit_) return false;
  const int32_t a = added_index_[static_cast<size_t>(id)];
  if (a < 0) return false;
  const AddedToken& t = added_->tokens()[static_cast<size_t>(a)];
  return t.special || (t.content.starts_with("<|") && t.content.ends_with("|>"));
}

std::optional<int32_t> Tokenizer::added_token_id(std::string_view content) const {
  for (const auto& t : added_->tokens())
    if (t.content == content) return t.id;
  return std::nullopt;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out.append(token_bytes(id));
  }
  return out;
}

}  // namespace qwick
