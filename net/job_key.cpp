// Job key files: reading with strict checks, writing fresh ones (see job_key.hpp).
#include "ringtrain/net/job_key.hpp"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ringtrain/errors.hpp"

namespace rt::net {
namespace {

const char* kMakeOne = "make one with 'ringtrain keygen --out FILE' and copy it to every host";

void init_sodium() {
  if (sodium_init() < 0) throw RuntimeError("libsodium failed to initialise; cannot use job keys");
}

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

JobKey derive_job_key(const std::array<uint8_t, kJobKeyBytes>& secret) {
  init_sodium();
  static_assert(crypto_box_SEEDBYTES == kJobKeyBytes && crypto_box_PUBLICKEYBYTES == 32 && crypto_box_SECRETKEYBYTES == 32);
  JobKey k;
  if (crypto_box_seed_keypair(k.public_key.data(), k.secret_key.data(), secret.data()) != 0)
    throw RuntimeError("deriving the job keypair failed");
  return k;
}

JobKey load_job_key(const std::string& path) {
  const std::string where = "key file " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) throw UsageError(where + " does not exist; " + kMakeOne);
    if (errno == ELOOP) throw UsageError(where + " is a symbolic link; pass the key file itself");
    throw UsageError("cannot open " + where + ": " + std::strerror(errno));
  }
  struct stat st{};
  std::array<uint8_t, kJobKeyBytes> secret{};
  std::string problem;
  if (::fstat(fd, &st) != 0) problem = std::string("cannot stat it: ") + std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) problem = "is not a regular file; pass the file written by 'ringtrain keygen'";
  else if (st.st_mode & 077)
    problem = "can be read or written by group or others (mode " + std::to_string((st.st_mode >> 6) & 7) +
              std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) + "); run 'chmod 600 " + path + "'";
  else if (st.st_size != static_cast<off_t>(kJobKeyBytes))
    problem = "has " + std::to_string(st.st_size) + " bytes, but a job key is exactly 32; " + kMakeOne;
  else if (::read(fd, secret.data(), secret.size()) != static_cast<ssize_t>(secret.size()))
    problem = "could not be read whole";
  ::close(fd);
  if (!problem.empty()) {
    sodium_memzero(secret.data(), secret.size());
    throw UsageError(where + " " + problem);
  }
  JobKey key = derive_job_key(secret);
  sodium_memzero(secret.data(), secret.size());
  return key;
}

void write_new_job_key(const std::string& path, bool overwrite) {
  init_sodium();
  struct stat st{};
  if (!overwrite && ::lstat(path.c_str(), &st) == 0)
    throw UsageError(path + " already exists; keep using it (copy it to every host), or pass --force to replace it "
                     "(every rank and client then needs the new one)");
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  // O_EXCL: never write into a file someone else prepared; 0600 before any byte is written.
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      throw UsageError("cannot write " + path + ": directory " + dir_of(path) + " does not exist");
    throw RuntimeError("cannot create " + tmp + ": " + std::strerror(errno));
  }
  std::array<uint8_t, kJobKeyBytes> secret{};
  randombytes_buf(secret.data(), secret.size());
  const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, secret.data(), secret.size()) == static_cast<ssize_t>(secret.size()) &&
                  ::fsync(fd) == 0;
  const int write_errno = errno;
  sodium_memzero(secret.data(), secret.size());
  if (::close(fd) != 0 || !ok) {
    ::unlink(tmp.c_str());
    throw RuntimeError("cannot write " + tmp + ": " + std::strerror(write_errno));
  }
  // link() fails if the name appeared meanwhile (never clobbers); rename() replaces on --force.
  const int rc = overwrite ? ::rename(tmp.c_str(), path.c_str()) : ::link(tmp.c_str(), path.c_str());
  const int place_errno = errno;
  if (!overwrite || rc != 0) ::unlink(tmp.c_str());
  if (rc != 0) {
    if (place_errno == EEXIST) throw UsageError(path + " already exists; pass --force to replace it");
    throw RuntimeError("cannot put the key at " + path + ": " + std::strerror(place_errno));
  }
  // The key's name is durable only once its directory is: a key that vanished after a power
  // cut would lock every rank out of the job.
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool synced = dfd >= 0 && ::fsync(dfd) == 0;
  const int sync_errno = errno;
  if (dfd >= 0) ::close(dfd);
  if (!synced)
    throw RuntimeError("wrote " + path + " but cannot sync its directory " + dir_of(path) + ": " +
                       std::strerror(sync_errno) + "; check the disk and run keygen again with --force");
}

}  // namespace rt::net
