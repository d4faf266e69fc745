// The embedded helper, run with python3 (see python_helper.hpp).
#include "python_helper.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"

extern const char kNanochatHelperPy[];  // nanochat_helper.py, embedded at build time

namespace rt::interop {
namespace fs = std::filesystem;

constexpr const char* kMark = "ringtrain-helper: ";  // nanochat_helper.py's fail()

void run_helper(const std::vector<std::string>& args, const std::string& scratch, const std::string& what) {
  const std::string script = (fs::path(scratch) / ".nanochat_helper.py").string();
  io::write_file_atomic(script, [](const io::ByteSink& sink) { sink(kNanochatHelperPy, std::strlen(kNanochatHelperPy)); });
  const std::string err_path = script + ".err";
  const char* env = std::getenv("RINGTRAIN_PYTHON");
  const std::string python = env && *env ? env : "python3";
  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid < 0) throw RuntimeError("cannot start python3 for " + what + " (fork failed)");
  if (pid == 0) {
    const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 2);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // The helper marks its complaint; PyTorch may print warnings before it. Without a mark
  // (python3 itself failed), the last line says most.
  std::string err, line;
  {
    std::ifstream in(err_path);
    while (std::getline(in, line)) {
      if (line.rfind(kMark, 0) == 0) {
        err = line.substr(std::strlen(kMark));
        break;
      }
      if (!line.empty()) err = line;
    }
  }
  fs::remove(script), fs::remove(err_path);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    throw UsageError(what + " needs " + python + " with PyTorch (Debian: apt install python3-torch); set RINGTRAIN_PYTHON to another interpreter");
  throw UsageError(err.empty() ? "python3 failed at " + what + "; run it by hand to see why" : err);
}


}  // namespace rt::interop
