// `ringtrain info` and `ringtrain bench model` as a user runs them: JSON fields, exit codes.
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

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

BOOST_AUTO_TEST_CASE(bad_configs_exit_2) {
  BOOST_TEST(run("info --depth 3 --json").code == 2);                    // 192 % 128 != 0
  BOOST_TEST(run("info --depth 8 --n-kv-head 3 --json").code == 2);      // 3 does not divide 4
  BOOST_TEST(run("info --depth 8 --window-pattern SXL --json").code == 2);
  BOOST_TEST(run("info --no-such-flag").code == 2);
  BOOST_TEST(run("bench model --depth 2 --seq-len 64 --vocab 256 --device-batch 1 --steps 1 --warmup 0 --optimizer adam").code == 2);
  BOOST_TEST(run("info --help").code == 0);
  BOOST_TEST(run("bench model --help").code == 0);
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
