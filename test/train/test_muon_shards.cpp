// Which rank owns which Muon matrix under --sync grad: every matrix exactly once, each
// block's reduce-scatter segments cover the block in owner order, and for nanochat's d8
// the parts are even (the smallest part sets the ring's cost) and the Polar Express work
// is shared out evenly.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>

#include "ringtrain/model/config.hpp"
#include "ringtrain/model/layout.hpp"
#include "sync/muon_shards.hpp"

using namespace rt;

namespace {

// The parameter table of a config (names and shapes only: nothing is allocated) and its
// Muon matrices, as MuonAdamW lists them.
struct Table {
  model::ParamSet params;
  std::vector<optim::MuonMatrix> muon;
};

Table table_of(const model::ModelConfig& cfg) {
  Table t;
  for (const auto& s : model::param_specs(cfg)) {
    if (model::classify_param(s.name).optim == model::OptimGroup::muon)
      t.muon.push_back({int(t.params.all().size()), s.shape[0], s.shape[1]});
    t.params.add(s.name, s.shape);
  }
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(muon_shards)

BOOST_AUTO_TEST_CASE(every_matrix_has_one_owner_and_d8_parts_are_even) {
  const auto cfg = model::ModelConfig::from_depth(8, 1024, 32768);
  const Table t = table_of(cfg);
  BOOST_REQUIRE_EQUAL(t.muon.size(), 8u * 6 + 4);  // six matrices per block, ve_gate in four
  for (int world : {1, 2, 3, 4}) {
    BOOST_TEST_CONTEXT("world " << world) {
      const auto s = train::assign_muon_shards(t.muon, t.params, world);
      BOOST_REQUIRE_EQUAL(s.owned.size(), size_t(world));
      BOOST_REQUIRE_EQUAL(s.groups.size(), 8u);  // one per block
      std::vector<int> owner(t.muon.size(), -1);
      std::vector<double> work(size_t(world), 0.0);
      for (int r = 0; r < world; ++r)
        for (int m : s.owned[size_t(r)]) {
          BOOST_REQUIRE(owner[size_t(m)] == -1);
          owner[size_t(m)] = r;
          const auto& mm = t.muon[size_t(m)];
          work[size_t(r)] += double(mm.rows) * double(mm.cols) * double(std::min(mm.rows, mm.cols));
        }
      BOOST_TEST(std::count(owner.begin(), owner.end(), -1) == 0);
      for (const auto& g : s.groups) {
        BOOST_REQUIRE_EQUAL(g.bounds.size(), size_t(world) + 1);
        BOOST_TEST(g.bounds[0] == 0u);
        // The matrices in owner order fill each owner's segment exactly.
        size_t at = 0;
        for (int m : g.matrices) {
          const int r = owner[size_t(m)];
          BOOST_TEST((at >= g.bounds[size_t(r)] && at < g.bounds[size_t(r) + 1]));
          at += size_t(t.muon[size_t(m)].rows * t.muon[size_t(m)].cols);
        }
        BOOST_TEST(at == g.elements());
        size_t smallest = g.elements();
        for (int r = 0; r < world; ++r) smallest = std::min(smallest, g.bounds[size_t(r) + 1] - g.bounds[size_t(r)]);
        // d8 deals out evenly at 2 and 3 ranks (only the tiny ve_gate breaks ties).
        if (world <= 3) BOOST_TEST(double(smallest) >= 0.999 * double(g.elements()) / world);
      }
      const auto [lo, hi] = std::minmax_element(work.begin(), work.end());
      BOOST_TEST(*lo >= 0.8 * *hi);
      // A pure function of the shapes: every rank computes the same deal.
      const auto again = train::assign_muon_shards(t.muon, t.params, world);
      BOOST_TEST((again.owned == s.owned));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
