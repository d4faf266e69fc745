// A private directory for a command's temporary files, made beside its output (same file
// system, so its files can be renamed into place) and removed with everything in it.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace rt::cli {

class ScratchDir {
 public:
  ScratchDir(const std::string& beside, const char* what)
      : dir_(std::filesystem::absolute(beside).parent_path() / (std::string(".ringtrain-") + what + "-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string path() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace rt::cli
