// The state file of checkpoints: tensors and JSON scalars round-trip exactly, and what does
// not fit (another size, a missing entry, a plain safetensors file, corrupt bytes) is
// refused with a one-line error naming the entry.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/state_file.hpp"

using namespace rt::io;

namespace {

// A predicate for BOOST_CHECK_EXCEPTION: a one-line error that contains `part`.
auto says(const std::string& part) {
  return [part](const rt::UsageError& e) {
    const std::string msg = e.what();
    return msg.find(part) != std::string::npos && msg.find('\n') == std::string::npos;
  };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(state_file)

BOOST_AUTO_TEST_CASE(round_trip_and_refusals) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f};
  StateWriter w;
  w.floats("optimizer.w.exp_avg", a);
  w.int64s("loader.buffer", {7, 0, 9, 2});
  w.scalars("loader")["cursor"] = uint64_t(12345678901234ull);
  w.scalars("optimizer")["w.step"] = 3;
  const std::string bytes = w.bytes();

  const StateReader r = StateReader::parse(bytes, "test state");
  std::vector<float> back(3);
  r.floats("optimizer.w.exp_avg", back);
  BOOST_TEST(back == a, boost::test_tools::per_element());
  BOOST_TEST(r.int64s("loader.buffer") == std::vector<int64_t>({7, 0, 9, 2}), boost::test_tools::per_element());
  BOOST_TEST(r.count("loader", "cursor") == 12345678901234ull);
  BOOST_TEST(r.integer("optimizer", "w.step") == 3);

  std::vector<float> wrong(4);
  BOOST_CHECK_EXCEPTION(r.floats("optimizer.w.exp_avg", wrong), rt::UsageError, says("optimizer.w.exp_avg holds 3"));
  BOOST_CHECK_EXCEPTION(r.floats("optimizer.v.exp_avg", back), rt::UsageError, says("has no optimizer.v.exp_avg"));
  BOOST_CHECK_EXCEPTION(r.integer("loader", "epoch"), rt::UsageError, says("loader.epoch"));
  BOOST_CHECK_THROW(r.count("optimizer", "nothing"), rt::UsageError);

  // A safetensors file that is not a state file, truncated bytes, garbage.
  std::string plain;
  write_safetensors([&](const void* p, size_t n) { plain.append(static_cast<const char*>(p), n); },
                    {{"x", DType::F32, {3}, a.data()}});
  BOOST_CHECK_EXCEPTION(StateReader::parse(plain, "weights"), rt::UsageError, says("not a ringtrain state file"));
  BOOST_CHECK_THROW(StateReader::parse(bytes.substr(0, bytes.size() - 1), "cut"), rt::UsageError);
  BOOST_CHECK_THROW(StateReader::parse("garbage!garbage!", "garbage"), rt::UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
