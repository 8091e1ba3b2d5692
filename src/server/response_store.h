// The Responses API's stored responses (store: true), for previous_response_id and
// GET / DELETE /v1/responses/{id}: in memory, bounded by a count and an age. Past the count the
// oldest go first; past the age a response is gone. Each keeps the response object and the
// conversation a next turn continues (the template's messages, input and output).
//
// Thread-safe (HTTP threads store, read and delete). Tested in tests/server/openai_responses_test.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace qwick {

class ResponseStore {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    nlohmann::ordered_json response;      // the response object, as GET returns it
    nlohmann::ordered_json conversation;  // what a previous_response_id continues
    Clock::time_point stored;
  };

  ResponseStore(size_t max_entries, Clock::duration max_age) : max_entries_(max_entries), max_age_(max_age) {}

  void put(const std::string& id, Entry entry);
  std::optional<Entry> get(const std::string& id);
  // False when there was no such (live) response.
  bool erase(const std::string& id);
  size_t size();

 private:
  void expire(Clock::time_point now);  // (mutex held)

  const size_t max_entries_;
  const Clock::duration max_age_;
  std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::string> order_;  // ids, oldest first (erased ones are skipped lazily)
};

}  // namespace qwick
