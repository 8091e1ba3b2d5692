#include "text/stream_decoder.h"

#include "text/utf8.h"

namespace qwick {

std::string StreamDecoder::push(int32_t id) {
  if (skip_control_ && tokenizer_->is_control(id)) return {};
  pending_.append(tokenizer_->token_bytes(id));
  const size_t complete = utf8_complete_prefix(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace qwick
