#include "flags.hpp"

#include <omp.h>

#include <cstdio>

namespace rt::cli {

bool parse(cxxopts::Options& spec, int argc, char** argv, cxxopts::ParseResult& r, const char* example) {
  spec.add_options()("h,help", "this help");
  try {
    r = spec.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw UsageError(std::string(e.what()) + "; run '" + argv[0] + " --help'");
  }
  if (!r.unmatched().empty())
    throw UsageError("unexpected argument '" + r.unmatched()[0] + "'; run '" + std::string(argv[0]) + " --help'");
  if (r.count("help")) {
    std::printf("%s\nexample:\n  %s\n", spec.help().c_str(), example);
    return false;
  }
  return true;
}

void set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

const char* const kKeyHelp = "the job's key file (ringtrain keygen), when its ranks run with --key";

std::optional<net::JobKey> key_flag(const cxxopts::ParseResult& r) {
  if (!r.count("key")) return std::nullopt;
  return net::load_job_key(r["key"].as<std::string>());
}

}  // namespace rt::cli
