// The subcommands of the `ringtrain` binary. Each takes the arguments after its own name
// (argv[0] is the full command name, e.g. "ringtrain bench model") and returns the exit
// code. They throw rt::UsageError for bad input (exit 2) and anything else for runtime
// failures (exit 1); main() prints the one-line message.
#pragma once

namespace rt::cli {

int cmd_info(int argc, char** argv);
int cmd_data(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_sample(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_import(int argc, char** argv);
int cmd_bench_model(int argc, char** argv);
int cmd_bench_allreduce(int argc, char** argv);
int cmd_keygen(int argc, char** argv);
int cmd_status(int argc, char** argv);
int cmd_stop(int argc, char** argv);
int cmd_watch(int argc, char** argv);

}  // namespace rt::cli
