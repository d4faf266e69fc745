// Atomic file replacement: temp file in the target's directory, fsync, rename, fsync dir.
#include "ringtrain/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ringtrain/errors.hpp"

namespace rt::io {
namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw WriteError(what + " " + path + ": " + std::strerror(errno) +
                   "; check that the directory exists, is writable and has space");
}

}  // namespace

void write_file_atomic(const std::string& path,
                       const std::function<void(const ByteSink&)>& produce) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", tmp);
  try {
    produce([&](const void* data, size_t size) {
      const char* p = static_cast<const char*>(data);
      while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0) {
          if (errno == EINTR) continue;
          fail("cannot write", tmp);
        }
        p += n;
        size -= size_t(n);
      }
    });
    if (::fsync(fd) != 0) fail("cannot fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail("cannot rename onto", path);
  }
  // Make the rename itself durable.
  fsync_directory(dir_of(path));
}

RemoveOnExit::~RemoveOnExit() {
  std::error_code ec;
  for (const auto& p : paths)
    if (!p.empty()) std::filesystem::remove(p, ec);
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory", dir);
  // EINVAL: a file system that cannot sync directories (nothing more to be had there).
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL;
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (!ok) fail("cannot fsync directory", dir);
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(data, size); });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("cannot open " + path + "; check the path");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace rt::io
