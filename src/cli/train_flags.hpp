// `ringtrain train`'s flags: parsing, defaults and the checks that give one-line errors,
// into the train::TrainOptions the trainer runs with.
#pragma once
#include "ringtrain/train/options.hpp"

namespace rt::cli {

// Throws rt::UsageError with a one-line message. Returns false when --help was printed.
bool parse_train_flags(int argc, char** argv, train::TrainOptions& out);

}  // namespace rt::cli
