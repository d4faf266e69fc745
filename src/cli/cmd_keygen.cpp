// `ringtrain keygen`: a new job key file.
#include <cstdio>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/net/job_key.hpp"

namespace rt::cli {

int cmd_keygen(int argc, char** argv) {
  cxxopts::Options spec(argv[0], "Write a new job key: 32 random bytes, readable by you only. Every rank and every "
                                 "status/stop/watch client of a job needs the same key (--key FILE).");
  spec.add_options()("out", "the key file to write", cxxopts::value<std::string>())(
      "force", "replace an existing file (ranks and clients holding the old key are locked out)");
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain keygen --out job.key && scp -p job.key 10.0.0.2:ringtrain/")) return 0;
  const auto out = need<std::string>(r, "out", argv[0]);
  net::write_new_job_key(out, r.count("force") > 0);
  std::printf("wrote %s (mode 600); copy it to every host keeping it private (e.g. scp -p %s HOST:DIR/) and pass "
              "--key %s to train, bench allreduce, status, stop and watch\n",
              out.c_str(), out.c_str(), out.c_str());
  return 0;
}

}  // namespace rt::cli
