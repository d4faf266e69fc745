// ringtrain: one binary, one subcommand per job. This file only dispatches and maps
// errors to exit codes (0 ok, 1 runtime failure, 2 bad usage or bad input).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.hpp"
#include "version.hpp"
#include "ringtrain/errors.hpp"
#include "ringtrain/kernels/subnormals.hpp"
#include "ringtrain/train/log.hpp"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"info", rt::cli::cmd_info, "parameter counts, FLOPs per token and windows of a config"},
    {"data", rt::cli::cmd_data, "data prepare: train the tokenizer and tokenize text into shards"},
    {"train", rt::cli::cmd_train, "train a model, on one process or on several hosts"},
    {"eval", rt::cli::cmd_eval, "val loss and bits per byte of a checkpoint"},
    {"sample", rt::cli::cmd_sample, "generate text from a checkpoint"},
    {"export", rt::cli::cmd_export, "write a checkpoint as nanochat-keyed safetensors"},
    {"import", rt::cli::cmd_import, "read nanochat-keyed safetensors into a checkpoint"},
    {"keygen", rt::cli::cmd_keygen, "write a new job key (--key FILE of every rank and client)"},
    {"status", rt::cli::cmd_status, "ask a running job for its state"},
    {"stop", rt::cli::cmd_stop, "ask a running job to checkpoint and exit"},
    {"watch", rt::cli::cmd_watch, "serve a live web page and Prometheus metrics of a running job"},
};

void print_help() {
  std::printf(
      "ringtrain: pretrain nanochat GPT models on the CPUs of several hosts\n\n"
      "usage: ringtrain <command> [options]   (ringtrain <command> --help for each)\n\n");
  for (const auto& c : kCommands) std::printf("  %-16s %s\n", c.name, c.summary);
  std::printf("  %-16s %s\n", "bench model", "forward+backward tok/s, MFU and peak RSS");
  std::printf("  %-16s %s\n", "bench allreduce", "ring all-reduce bandwidth between ranks");
  std::printf(
      "\nexample:\n  ringtrain info --depth 8 --json\n"
      "  ringtrain train --depth 4 --data data/ --out run/ --steps 500\n"
      "\nringtrain --version prints the version and the git revision of the build.\n");
}

int dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  if (name == "--version") {
    std::printf("ringtrain %s (git %s)\n", rt::cli::version(), rt::cli::git_revision());
    return 0;
  }
  if (name == "bench") {
    std::string target = argc >= 3 ? argv[2] : "";
    auto run = target == "model" ? rt::cli::cmd_bench_model
               : target == "allreduce" ? rt::cli::cmd_bench_allreduce : nullptr;
    if (!run)
      throw rt::UsageError("bench needs a target: 'ringtrain bench model' or 'ringtrain bench allreduce'");
    std::string full = "ringtrain bench " + target;
    argv[2] = full.data();
    return run(argc - 2, argv + 2);
  }
  for (const auto& c : kCommands) {
    if (name == c.name) {
      std::string full = "ringtrain " + name;
      argv[1] = full.data();
      return c.run(argc - 1, argv + 1);
    }
  }
  throw rt::UsageError("unknown command '" + name + "'; run 'ringtrain --help' for the list");
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists, so that OpenMP's, oneDNN's and ZeroMQ's threads inherit it.
  rt::kernels::flush_subnormals_to_zero();
  try {
    return dispatch(argc, argv);
  } catch (const rt::UsageError& e) {
    std::fprintf(stderr, "%sringtrain: error: %s\n", rt::train::log_prefix().c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%sringtrain: error: %s\n", rt::train::log_prefix().c_str(), e.what());
    return 1;
  }
}
