// `ringtrain info` and `ringtrain bench model` as a user runs them: JSON fields, exit codes.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace {

struct Run {
  int code;
  std::string out;
};

std::string binary() {
  const char* bin = std::getenv("RINGTRAIN_BIN");
  return bin ? bin : "build/ringtrain";
}

Run run(const std::string& args) {
  BOOST_TEST_REQUIRE(access(binary().c_str(), X_OK) == 0, binary() << " is missing; build the ringtrain target first");
  const std::string cmd = binary() + " " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cli)

// nanochat's d8 numbers (nanochat/gpt.py: GPT.num_scaling_params() total, GPT.estimate_flops()).
BOOST_AUTO_TEST_CASE(info_d8_json) {
  const auto r = run("info --depth 8 --json");
  BOOST_TEST_REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["params_total"].get<int64_t>() == 125829354);
  BOOST_TEST(j["params"]["wte"].get<int64_t>() == 16777216);
  BOOST_TEST(j["params"]["value_embeds"].get<int64_t>() == 67108864);
  BOOST_TEST(j["params"]["lm_head"].get<int64_t>() == 16777216);
  BOOST_TEST(j["params"]["transformer_matrices"].get<int64_t>() == 25166016);
  BOOST_TEST(j["params"]["scalars"].get<int64_t>() == 42);
  BOOST_TEST(j["flops_per_token"].get<int64_t>() == 273679632);
  const std::vector<int64_t> w = {256, 256, 256, 1024, 256, 256, 256, 1024};
  BOOST_TEST(j["windows"].get<std::vector<int64_t>>() == w, boost::test_tools::per_element());
}

// Odd depths as nanochat builds them: d3's 192 is rounded up to 256, two heads of 128.
BOOST_AUTO_TEST_CASE(odd_depth_rounds_up_to_whole_heads) {
  const auto r = run("info --depth 3 --json");
  BOOST_REQUIRE_MESSAGE(r.code == 0, r.out);
  const auto j = nlohmann::json::parse(r.out);
  BOOST_TEST(j["config"]["n_embd"].get<int64_t>() == 256);
  BOOST_TEST(j["config"]["n_head"].get<int64_t>() == 2);
}

BOOST_AUTO_TEST_CASE(bad_configs_exit_2) {
  BOOST_TEST(run("info --depth 8 --head-dim 3 --json").code == 2);       // rotary needs an even head size
  BOOST_TEST(run("info --depth 8 --n-kv-head 3 --json").code == 2);      // 3 does not divide 4
  BOOST_TEST(run("info --depth 8 --window-pattern SXL --json").code == 2);
  BOOST_TEST(run("info --no-such-flag").code == 2);
  BOOST_TEST(run("bench model --depth 2 --seq-len 64 --vocab 256 --device-batch 1 --steps 1 --warmup 0 --optimizer adam").code == 2);
  BOOST_TEST(run("info --help").code == 0);
  BOOST_TEST(run("bench model --help").code == 0);
}

BOOST_AUTO_TEST_CASE(version_names_release_and_git_revision) {
  const auto r = run("--version");
  BOOST_TEST_REQUIRE(r.code == 0);
  std::smatch m;
  BOOST_TEST_REQUIRE(std::regex_match(r.out, m, std::regex(R"(ringtrain (\d+\.\d+\.\d+) \(git (\S+)\)\n)")), r.out);
  // Built from a git clone, the revision is the checked-out commit's (tags: "TAG-N-gHASH").
  const std::string root = std::getenv("RINGTRAIN_SOURCE_ROOT") ? std::getenv("RINGTRAIN_SOURCE_ROOT") : ".";
  FILE* p = popen(("git -C " + root + " rev-parse HEAD 2>/dev/null").c_str(), "r");
  char head[64] = {0};
  const bool in_git = p && fgets(head, sizeof head, p) && pclose(p) == 0;
  if (in_git) {
    std::string rev = m[2].str();
    rev = rev.substr(0, rev.find("-dirty"));
    if (rev.find("-g") != std::string::npos) rev = rev.substr(rev.rfind("-g") + 2);
    BOOST_TEST(rev.size() >= 7u);
    BOOST_TEST(std::string(head).rfind(rev, 0) == 0u, "revision " << rev << " is not HEAD " << head);
  } else {
    BOOST_TEST(m[2].str() == "unknown");
  }
}

BOOST_AUTO_TEST_CASE(bench_model_tiny_json) {
  const auto r = run("bench model --depth 2 --seq-len 64 --vocab 256 --device-batch 1 --threads 1 --steps 2 --warmup 1 --json");
  BOOST_TEST_REQUIRE(r.code == 0);
  int lines = 0;
  size_t start = 0;
  while (start < r.out.size()) {
    const size_t end = r.out.find('\n', start);
    const auto j = nlohmann::json::parse(r.out.substr(start, end - start));
    for (const char* k : {"tok_per_s", "step_s", "flops_per_token", "peak_gflops", "mfu", "peak_rss_mb"})
      BOOST_TEST(j.contains(k), k);
    BOOST_TEST(j["tok_per_s"].get<double>() > 0);
    BOOST_TEST(j["mfu"].get<double>() > 0);
    ++lines;
    start = end + 1;
  }
  BOOST_TEST(lines == 3);  // two steps and the median
}

BOOST_AUTO_TEST_SUITE_END()
