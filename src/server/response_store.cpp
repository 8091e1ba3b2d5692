#include "server/response_store.h"

namespace qwick {

void ResponseStore::expire(Clock::time_point now) {
  while (!order_.empty()) {
    const auto it = entries_.find(order_.front());
    if (it != entries_.end() && entries_.size() <= max_entries_ && now - it->second.stored < max_age_) break;
    if (it != entries_.end()) entries_.erase(it);
    order_.pop_front();
  }
}

void ResponseStore::put(const std::string& id, Entry entry) {
  std::lock_guard lock(mutex_);
  entry.stored = Clock::now();
  if (entries_.insert_or_assign(id, std::move(entry)).second) order_.push_back(id);
  expire(Clock::now());
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  expire(Clock::now());
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  expire(Clock::now());
  return entries_.erase(id) > 0;
}

size_t ResponseStore::size() {
  std::lock_guard lock(mutex_);
  expire(Clock::now());
  return entries_.size();
}

}  // namespace qwick
