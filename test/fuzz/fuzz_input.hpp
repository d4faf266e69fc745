// Shared by the libFuzzer targets: the input as a string, as a file for the readers that
// take a path, and the rule of every target: a parser may refuse its input only with one of
// ringtrain's errors (a one-line message for the user); a crash, a sanitizer report, a
// leak, an allocation over libFuzzer's -malloc_limit_mb or any other exception is a bug.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "ringtrain/errors.hpp"

namespace fuzzing {

inline std::string text(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

// The input written to a file of this process (rewritten for every input), mode 600.
inline std::string as_file(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/ringtrain-fuzz-" + std::to_string(getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  chmod(path.c_str(), 0600);
  return path;
}

// Runs the parser; ringtrain's own refusals are expected, anything else escapes and is
// reported by libFuzzer as a crash.
template <class F>
void refused_or_parsed(F&& parse) {
  try {
    parse();
  } catch (const rt::UsageError&) {
  } catch (const rt::RuntimeError&) {
  }
}

}  // namespace fuzzing
