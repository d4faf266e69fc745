// Placeholder until this subcommand is written.
#include "ringtrain/cli/commands.hpp"
#include "ringtrain/errors.hpp"

namespace rt::cli {
int cmd_bench_allreduce(int, char**) { throw RuntimeError("'bench_allreduce' is not implemented yet"); }
}  // namespace rt::cli
