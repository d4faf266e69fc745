// flush_subnormals_to_zero(): subnormal inputs and results become zero on this thread, on
// threads started afterwards and in oneDNN's matmul; normal values are untouched.
#include <boost/test/unit_test.hpp>

#include <limits>
#include <thread>
#include <vector>

#include "ringtrain/kernels/matmul.hpp"
#include "ringtrain/kernels/subnormals.hpp"

namespace {
// Kept out of the optimiser's sight, so that the multiplication happens at run time.
float opaque(float x) {
  volatile float v = x;
  return v;
}
const float kSubnormal = std::numeric_limits<float>::denorm_min() * 1000.0f;  // about 1.4e-42
}  // namespace

BOOST_AUTO_TEST_SUITE(subnormals)

BOOST_AUTO_TEST_CASE(are_flushed_on_this_thread_and_its_new_threads) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  BOOST_REQUIRE(opaque(kSubnormal) * opaque(1.0f) != 0.0f);  // the test can fail: not yet flushed
  rt::kernels::flush_subnormals_to_zero();
  BOOST_CHECK(rt::kernels::subnormals_flushed());
  BOOST_CHECK_EQUAL(opaque(kSubnormal) * opaque(1.0f), 0.0f);
  BOOST_CHECK_EQUAL(opaque(1e-30f) * opaque(1e-10f), 0.0f);  // a subnormal result
  BOOST_CHECK_EQUAL(opaque(1.5f) * opaque(2.0f), 3.0f);
  BOOST_CHECK_EQUAL(opaque(1e-18f) * opaque(1e-18f), 1e-18f * 1e-18f);  // normal: untouched
  bool flushed_there = false;
  float product_there = -1;
  std::thread t([&] {
    flushed_there = rt::kernels::subnormals_flushed();
    product_there = opaque(kSubnormal) * opaque(1.0f);
  });
  t.join();
  BOOST_CHECK(flushed_there);
  BOOST_CHECK_EQUAL(product_there, 0.0f);
#else
  BOOST_TEST_MESSAGE("no flush control on this architecture");
#endif
}

BOOST_AUTO_TEST_CASE(reach_onednn_matmul) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  rt::kernels::flush_subnormals_to_zero();
  // C = A B with A's entries subnormal: zero when flushed, about 1.4e-42 * 16 otherwise.
  const int64_t n = 16;
  std::vector<float> a(size_t(n * n), kSubnormal), b(size_t(n * n), 1.0f), c(size_t(n * n), -1.0f);
  rt::kernels::gemm_batched(1, false, false, n, n, n, 1.0f, a.data(), n, 0, b.data(), n, 0, 0.0f, c.data(), n, 0);
  for (float v : c) BOOST_CHECK_EQUAL(v, 0.0f);
#endif
}

BOOST_AUTO_TEST_SUITE_END()
