// `ringtrain stop HOST:PORT`: asks a running job to checkpoint on every rank and exit 0.
#include <cstdio>

#include "flags.hpp"
#include "commands.hpp"
#include "ringtrain/net/communicator.hpp"

namespace rt::cli {

int cmd_stop(int argc, char** argv) {
  cxxopts::Options spec(argv[0], "Ask a running job (any rank's HOST:PORT) to checkpoint on every rank and exit 0.");
  spec.add_options()("address", "HOST:PORT", cxxopts::value<std::string>())(
      "timeout", "seconds to wait for an answer", cxxopts::value<double>()->default_value("5"))(
      "key", kKeyHelp, cxxopts::value<std::string>());
  spec.parse_positional({"address"});
  cxxopts::ParseResult r;
  if (!parse(spec, argc, argv, r, "ringtrain stop 10.0.0.1:29500 --key job.key")) return 0;
  std::printf("%s\n",
              net::request(need<std::string>(r, "address", argv[0]), "stop", r["timeout"].as<double>(), key_flag(r)).c_str());
  return 0;
}

}  // namespace rt::cli
