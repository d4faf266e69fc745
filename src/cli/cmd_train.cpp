// Placeholder until training is written.
#include "ringtrain/cli/commands.hpp"
#include "ringtrain/errors.hpp"

namespace rt::cli {
int cmd_train(int, char**) { throw RuntimeError("'train' is not implemented yet"); }
int cmd_eval(int, char**) { throw RuntimeError("'eval' is not implemented yet"); }
int cmd_sample(int, char**) { throw RuntimeError("'sample' is not implemented yet"); }
int cmd_export(int, char**) { throw RuntimeError("'export' is not implemented yet"); }
int cmd_import(int, char**) { throw RuntimeError("'import' is not implemented yet"); }
int cmd_status(int, char**) { throw RuntimeError("'status' is not implemented yet"); }
int cmd_stop(int, char**) { throw RuntimeError("'stop' is not implemented yet"); }
}  // namespace rt::cli
