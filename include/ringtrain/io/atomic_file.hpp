// Crash-safe file writes: write to a temporary name in the same directory, fsync it,
// rename over the target, fsync the directory. Readers see the old file or the new one,
// never a torn one.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace rt::io {

// Writes `size` bytes. Throws rt::WriteError naming the path on any failure.
void write_file_atomic(const std::string& path, const void* data, size_t size);

// The same for content produced in pieces: `produce` is called with a write function.
using ByteSink = std::function<void(const void* data, size_t size)>;
void write_file_atomic(const std::string& path, const std::function<void(const ByteSink&)>& produce);

// fsyncs a directory, so that the renames and removals in it survive a power cut. Throws
// rt::WriteError on failure (a file system that cannot sync directories is not one).
void fsync_directory(const std::string& dir);

// Reads a whole file; throws rt::UsageError if it cannot be opened.
std::string read_file(const std::string& path);

// Temporary files removed when it goes out of scope, whatever happened (empty names and
// files never made are skipped).
struct RemoveOnExit {
  std::vector<std::string> paths;
  ~RemoveOnExit();
};

}  // namespace rt::io
