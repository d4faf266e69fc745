// Placeholder until this subcommand is written.
#include "ringtrain/cli/commands.hpp"
#include "ringtrain/errors.hpp"

namespace rt::cli {
int cmd_info(int, char**) { throw RuntimeError("'info' is not implemented yet"); }
}  // namespace rt::cli
