// The qwick sub-commands. Each takes its own argv (argv[0] = "qwick <command>") and returns the
// process exit code; errors are thrown as qwick::Error and reported by main().
#pragma once

namespace qwick {

int cmd_run(int argc, char** argv);
int cmd_info(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_make_model(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_detokenize(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_schema_bench(int argc, char** argv);

}  // namespace qwick
