// safetensors: round trip of every dtype, metadata, a file written by the Python reader's
// format rules (8-byte header length, JSON, offsets), and corrupt files as usage errors.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "ringtrain/errors.hpp"
#include "ringtrain/io/atomic_file.hpp"
#include "ringtrain/io/safetensors.hpp"
#include "../common/temp_dir.hpp"

namespace io = rt::io;

using testcommon::TempDir;

BOOST_AUTO_TEST_SUITE(safetensors)

BOOST_AUTO_TEST_CASE(round_trip_all_dtypes) {
  TempDir d;
  const std::string path = d.str() + "/t.safetensors";
  std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  std::vector<double> g = {1.0 / 3.0, -1e300};
  std::vector<int32_t> i = {-1, 2, 2147483647};
  std::vector<int64_t> l = {-5, int64_t(1) << 40};
  io::write_safetensors(path,
                        {{"w.f", io::DType::F32, {2, 3}, f.data()},
                         {"g", io::DType::F64, {2}, g.data()},
                         {"ids", io::DType::I32, {3}, i.data()},
                         {"big", io::DType::I64, {1, 2}, l.data()},
                         {"scalar", io::DType::F32, {}, f.data()}},
                        {{"step", "12"}, {"format", "pt"}});
  const auto file = io::SafetensorsFile::load(path);
  const std::vector<std::string> order = {"w.f", "g", "ids", "big", "scalar"};
  BOOST_TEST(file.names() == order, boost::test_tools::per_element());
  const auto& tf = file.get("w.f");
  BOOST_TEST(tf.shape == std::vector<int64_t>({2, 3}), boost::test_tools::per_element());
  BOOST_TEST(std::vector<float>(tf.f32(), tf.f32() + 6) == f, boost::test_tools::per_element());
  BOOST_TEST(file.get("g").f64()[0] == g[0]);
  BOOST_TEST(file.get("g").f64()[1] == g[1]);
  BOOST_TEST(file.get("ids").i32()[2] == 2147483647);
  BOOST_TEST(file.get("big").i64()[1] == (int64_t(1) << 40));
  BOOST_TEST(file.get("scalar").numel() == 1);
  BOOST_TEST(file.get("scalar").f32()[0] == 1.5f);
  BOOST_TEST(file.metadata().at("step") == "12");
  BOOST_CHECK_THROW(file.get("w.f").i64(), rt::UsageError);
  BOOST_CHECK_THROW(file.get("missing"), rt::UsageError);
  // Header length is a multiple of 8 so the data is aligned.
  const std::string raw = io::read_file(path);
  uint64_t hlen = 0;
  for (int k = 0; k < 8; ++k) hlen |= uint64_t(static_cast<unsigned char>(raw[k])) << (8 * k);
  BOOST_TEST(hlen % 8 == 0u);
  BOOST_TEST(raw.size() == 8 + hlen + 6 * 4 + 2 * 8 + 3 * 4 + 2 * 8 + 4);
}

BOOST_AUTO_TEST_CASE(corrupt_files_are_usage_errors) {
  TempDir d;
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(d.str() + "/" + name, std::ios::binary) << bytes;
    return d.str() + "/" + name;
  };
  auto le = [](uint64_t n) {
    std::string s(8, '\0');
    for (int k = 0; k < 8; ++k) s[k] = char((n >> (8 * k)) & 0xff);
    return s;
  };
  BOOST_CHECK_THROW(io::SafetensorsFile::load(write("short", "abc")), rt::UsageError);
  BOOST_CHECK_THROW(io::SafetensorsFile::load(write("len", le(1000) + "{}")), rt::UsageError);
  BOOST_CHECK_THROW(io::SafetensorsFile::load(write("json", le(3) + "{x}")), rt::UsageError);
  const std::string h = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  BOOST_CHECK_THROW(io::SafetensorsFile::load(write("trunc", le(h.size()) + h + std::string(8, '\0'))), rt::UsageError);
  const std::string bad = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})";
  BOOST_CHECK_THROW(io::SafetensorsFile::load(write("shape", le(bad.size()) + bad + std::string(16, '\0'))), rt::UsageError);
  const std::string dt = R"({"a":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})";
  BOOST_CHECK_THROW(io::SafetensorsFile::load(write("dtype", le(dt.size()) + dt + std::string(16, '\0'))), rt::UsageError);
  // Sizes that are not sizes: a float (converting 1e300 to an integer is undefined), a
  // negative, a product that overflows 64 bits, offsets that are floats, too many dimensions.
  for (const std::string shape : {"[1e300]", "[4.0]", "[-4]", "[4294967296,4294967296,4294967296]",
                                  "[65536,65536,65536,65536,0,65536]", "\"4\"", "[[4]]"}) {
    const std::string j = R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,16]}})";
    BOOST_CHECK_THROW(io::SafetensorsFile::load(write("s", le(j.size()) + j + std::string(16, '\0'))), rt::UsageError);
  }
  for (const std::string offsets : {"[0.0,16.0]", "[0,1e300]", "[-16,0]", "[0,16,32]", "[16]"}) {
    const std::string j = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":)" + offsets + "}}";
    BOOST_CHECK_THROW(io::SafetensorsFile::load(write("o", le(j.size()) + j + std::string(16, '\0'))), rt::UsageError);
  }
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += i ? ",1" : "1";
  const std::string deep = R"({"a":{"dtype":"F32","shape":)" + many + R"(],"data_offsets":[0,4]}})";
  BOOST_CHECK_THROW(io::SafetensorsFile::load(write("deep", le(deep.size()) + deep + std::string(4, '\0'))), rt::UsageError);
  // An empty tensor may be larger than the file along one axis.
  const std::string empty = R"({"a":{"dtype":"F32","shape":[1000000,0],"data_offsets":[0,0]}})";
  BOOST_TEST(io::SafetensorsFile::load(write("empty", le(empty.size()) + empty)).get("a").numel() == 0);
  // A valid hand-written file loads.
  const auto ok = io::SafetensorsFile::load(write("ok", le(h.size()) + h + std::string(16, '\0')));
  BOOST_TEST(ok.get("a").numel() == 4);
  BOOST_CHECK_THROW(io::SafetensorsFile::load(d.str() + "/does_not_exist"), rt::UsageError);
}

BOOST_AUTO_TEST_SUITE_END()
