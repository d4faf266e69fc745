// Where each rank sits on the ring. By default rank r's neighbours are r-1 and r+1; a ring
// that spans two sites joined by a slow link (CommOptions::ring_order) puts the ranks of a
// site next to each other instead, so that the ring crosses the slow link twice whatever
// the order of --peers. Every ring collective walks positions and maps them to ranks here;
// segments stay named by rank (after a reduce-scatter rank r owns segment r, in any order).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "ringtrain/errors.hpp"

namespace rt::net {

class RingOrder {
 public:
  // order: every rank once, in ring order; empty for 0, 1, ..., world-1.
  RingOrder(std::span<const int> order, int world, int rank) : rank_at_(size_t(world)), position_of_(size_t(world), -1) {
    if (!order.empty() && order.size() != size_t(world))
      throw RuntimeError("ring order of " + std::to_string(order.size()) + " ranks for a ring of " + std::to_string(world) +
                         " (internal error)");
    for (int p = 0; p < world; ++p) {
      const int r = order.empty() ? p : order[size_t(p)];
      if (r < 0 || r >= world || position_of_[size_t(r)] >= 0)
        throw RuntimeError("ring order is not a permutation of the ranks (internal error)");
      rank_at_[size_t(p)] = r;
      position_of_[size_t(r)] = p;
    }
    if (rank < 0 || rank >= world) throw RuntimeError("rank outside the ring (internal error)");
    position_ = position_of_[size_t(rank)];
  }

  int world() const { return int(rank_at_.size()); }
  int position() const { return position_; }
  int position_of(int rank) const { return position_of_.at(size_t(rank)); }
  // The rank at a position, taken modulo the ring's size.
  int rank_at(long position) const {
    const long n = long(rank_at_.size());
    return rank_at_[size_t(((position % n) + n) % n)];
  }
  int next() const { return rank_at(position_ + 1); }
  int prev() const { return rank_at(position_ - 1); }

 private:
  std::vector<int> rank_at_, position_of_;
  int position_ = 0;
};

// The ring order of ranks labelled with their sites (site[r]: rank r's): the sites in the
// order their first rank appears, each site's ranks together in rank order, so that the
// ring enters and leaves every site once.
inline std::vector<int> ring_order_by_site(const std::vector<std::string>& site) {
  std::vector<int> order;
  std::vector<bool> placed(site.size(), false);
  for (size_t first = 0; first < site.size(); ++first) {
    if (placed[first]) continue;
    for (size_t r = first; r < site.size(); ++r)
      if (!placed[r] && site[r] == site[first]) order.push_back(int(r)), placed[r] = true;
  }
  return order;
}

}  // namespace rt::net
