// Placeholder until this subcommand is written.
#include "ringtrain/cli/commands.hpp"
#include "ringtrain/errors.hpp"

namespace rt::cli {
int cmd_bench_model(int, char**) { throw RuntimeError("'bench_model' is not implemented yet"); }
}  // namespace rt::cli
