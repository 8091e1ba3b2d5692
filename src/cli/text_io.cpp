#include "cli/text_io.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace qwick {

std::string read_stdin() {
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0) text.append(buffer, n);
  if (std::ferror(stdin)) fail("cannot read stdin");
  return text;
}

void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void for_each_line(const std::string& text, const std::function<void(const std::string&, size_t)>& fn) {
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") != std::string::npos) fn(line, line_no);
  }
}

}  // namespace qwick
