// qwick template: a conversation (JSON) in, the exact prompt text out.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_text.h"
#include "cli/text_io.h"
#include "core/error.h"
#include "text/chat_template.h"

namespace qwick {
namespace {

using ojson = nlohmann::ordered_json;

// {"messages": [...], "tools": [...], "chat_template_kwargs": {...}, "add_generation_prompt": bool}
std::string render_request(const ojson& request, ChatTemplateKind kind) {
  if (!request.is_object()) fail("expected a JSON object with \"messages\"");
  if (!request.contains("messages")) fail("the request has no \"messages\"");
  ChatTemplateInput in;
  in.messages = request["messages"];
  in.tools = request.value("tools", ojson());
  in.kwargs = request.value("chat_template_kwargs", ojson::object());
  if (!in.kwargs.is_object()) fail("\"chat_template_kwargs\" must be an object");
  const ojson agp = request.value("add_generation_prompt", ojson(true));
  if (!agp.is_boolean()) fail("\"add_generation_prompt\" must be true or false");
  in.add_generation_prompt = agp.get<bool>();
  return render_chat_template(in, kind);
}

}  // namespace

int cmd_template(int argc, char** argv) {
  std::string template_file, model;
  bool jsonl = false;
  ArgParser p("qwick template [options] < REQUEST.json",
              "Reads {\"messages\": [...], \"tools\": [...], \"chat_template_kwargs\": {...},\n"
              "\"add_generation_prompt\": true} on stdin and prints the prompt exactly as the model's chat\n"
              "template renders it. A conversation the template rejects exits with status 1 and its reason.");
  p.option({"--chat-template"}, "FILE",
           "the chat_template.jinja to follow (Qwen3.6 or Qwen3.5; default Qwen3.6)", &template_file);
  p.option({"-m", "--model"}, "DIR", "follow this model directory's chat template", &model);
  p.flag({"--jsonl"}, "one request per stdin line; print {\"prompt\": ...} or {\"error\": ...} per line",
         &jsonl);
  if (!p.parse(argc, argv)) return 0;
  ChatTemplateKind kind = ChatTemplateKind::kQwen36;
  if (!template_file.empty())
    kind = chat_template_kind_of_file(template_file);
  else if (!model.empty())
    kind = load_model_text(model).template_kind;
  const std::string input = read_stdin();
  if (!jsonl) {
    const ojson request = ojson::parse(input, nullptr, false);
    if (request.is_discarded()) fail("stdin is not valid JSON");
    const std::string prompt = render_request(request, kind);
    write_stdout(prompt);
    return 0;
  }
  for_each_line(input, [&](const std::string& line, size_t line_no) {
    const ojson request = ojson::parse(line, nullptr, false);
    if (request.is_discarded()) fail("stdin line {}: not valid JSON", line_no);
    ojson result;
    try {
      result["prompt"] = render_request(request, kind);
    } catch (const Error& e) {
      result = {{"error", e.what()}};
    }
    write_stdout(result.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n");
  });
  return 0;
}

}  // namespace qwick
