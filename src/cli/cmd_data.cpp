// Placeholder until this subcommand is written.
#include "ringtrain/cli/commands.hpp"
#include "ringtrain/errors.hpp"

namespace rt::cli {
int cmd_data(int, char**) { throw RuntimeError("'data' is not implemented yet"); }
}  // namespace rt::cli
