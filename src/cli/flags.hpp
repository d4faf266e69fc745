// The flag helper every subcommand parses with, so that all of them word their help, their
// errors and their refusal of stray arguments alike.
#pragma once
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "ringtrain/errors.hpp"
#include "ringtrain/net/job_key.hpp"

namespace rt::cli {

// Parses with cxxopts (adding -h/--help), mapping its errors and any stray argument to a
// one-line UsageError. Returns false after printing the help for --help.
bool parse(cxxopts::Options& spec, int argc, char** argv, cxxopts::ParseResult& r, const char* example);

// The value of a required flag; UsageError naming it when it is missing.
template <class T>
T need(const cxxopts::ParseResult& r, const char* name, const char* cmd) {
  if (!r.count(name)) throw UsageError(std::string(cmd) + " needs --" + name + "; run '" + cmd + " --help'");
  return r[name].as<T>();
}

void set_threads(int n);

// --key FILE of the clients of a job (status, stop, watch, bench allreduce).
extern const char* const kKeyHelp;
std::optional<net::JobKey> key_flag(const cxxopts::ParseResult& r);

}  // namespace rt::cli
