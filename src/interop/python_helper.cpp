// The embedded helper, run with python3 (see python_helper.hpp).
#include "python_helper.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"

extern const char kNanochatHelperPy[];  // nanochat_helper.py, embedded at build time

namespace rt::interop {
namespace fs = std::filesystem;

constexpr const char* kMark = "ringtrain-helper: ";  // nanochat_helper.py's fail()

namespace {

// Where `name` is found on PATH (for messages: a bare "python3" does not say which one ran).
std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (size_t begin = 0; begin <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(begin, end - begin)) / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    begin = end + 1;
  }
  return name + " (not found on PATH)";
}

struct HelperRun {
  int status = 0;
  std::string complaint;  // the helper's marked line, else the last line python3 printed
};

HelperRun run_once(const std::string& python, const std::string& script, const std::vector<std::string>& args,
                   const std::string& what) {
  const std::string err_path = script + ".err";
  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid < 0) throw RuntimeError("cannot start " + python + " for " + what + " (fork failed)");
  if (pid == 0) {
    const int fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 2);
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    execvp(a[0], a.data());
    _exit(127);
  }
  HelperRun run;
  while (waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
  }
  // The helper marks its complaint; PyTorch may print warnings before it. Without a mark
  // (python3 itself failed), the last line says most.
  std::ifstream in(err_path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kMark, 0) == 0) {
      run.complaint = line.substr(std::strlen(kMark));
      break;
    }
    if (!line.empty()) run.complaint = line;
  }
  in.close();
  fs::remove(err_path);
  return run;
}

int exit_code(const HelperRun& run) { return WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1; }

}  // namespace

void run_helper(const std::vector<std::string>& args, const std::string& scratch, const std::string& what) {
  const std::string script = (fs::path(scratch) / ".nanochat_helper.py").string();
  io::write_file_atomic(script, [](const io::ByteSink& sink) { sink(kNanochatHelperPy, std::strlen(kNanochatHelperPy)); });
  struct ScriptGone {
    std::string path;
    ~ScriptGone() { std::error_code ec; fs::remove(path, ec); }
  } script_gone{script};
  // RINGTRAIN_PYTHON, when set, is the only interpreter. Otherwise python3 on PATH, and
  // Debian's own /usr/bin/python3 after it when the first has no PyTorch: a pyenv or venv
  // interpreter ahead on PATH rarely has torch, while Debian's python3-torch is installed
  // for /usr/bin/python3 only.
  const char* env = std::getenv("RINGTRAIN_PYTHON");
  const bool chosen = env && *env;
  std::vector<std::string> pythons;
  if (chosen) {
    pythons = {env};
  } else {
    pythons = {"python3"};
    std::error_code ec;
    const std::string first = on_path("python3");
    if (fs::exists(first, ec) && !fs::equivalent(first, "/usr/bin/python3", ec) && fs::exists("/usr/bin/python3", ec))
      pythons.push_back("/usr/bin/python3");
  }
  std::vector<std::string> without_torch;  // each interpreter tried that had no PyTorch, with its path
  for (const std::string& python : pythons) {
    const HelperRun run = run_once(python, script, args, what);
    const int code = exit_code(run);
    const std::string named = chosen ? python + " (RINGTRAIN_PYTHON)" : on_path(python);
    if (code == 0) {
      // Said only when it was not the first choice: which interpreter read the file is then news.
      if (!without_torch.empty())
        std::fprintf(stderr, "%s: done with %s (%s has no PyTorch)\n", what.c_str(), named.c_str(), without_torch.back().c_str());
      return;
    }
    if (code == 3) {  // the helper's "no PyTorch here": the next interpreter may have it
      without_torch.push_back(named);
      continue;
    }
    if (code == 127)
      throw UsageError(what + " needs python3: " + named + " could not be run; install Debian's python3 or set RINGTRAIN_PYTHON to an interpreter");
    throw UsageError(run.complaint.empty() ? named + " failed at " + what + "; run it by hand to see why" : run.complaint);
  }
  std::string tried;
  for (const auto& p : without_torch) tried += (tried.empty() ? "" : ", ") + p;
  throw UsageError(what + " needs PyTorch, and no interpreter tried has it (" + tried +
                   "): install Debian's python3-torch (apt install python3-torch), or set RINGTRAIN_PYTHON to a python3 with torch");
}

}  // namespace rt::interop
