// Finite-difference gradient checks against double-precision references.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace gradcheck {

inline std::vector<float> random_vec(size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> U(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = U(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Central differences of a scalar function of x (double), one coordinate at a time.
inline std::vector<double> numeric_grad(std::vector<double> x,
                                        const std::function<double(const std::vector<double>&)>& f,
                                        double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double up = f(x);
    x[i] = keep - eps;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

// max |a - b| / max |b|: the relative error measure used throughout the project.
template <typename A, typename B>
double rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  double diff = 0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / scale;
}

// sum(w * y): turns a vector output into the scalar loss whose gradient dy = w.
inline double dot(const std::vector<double>& y, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * double(w[i]);
  return s;
}

}  // namespace gradcheck
