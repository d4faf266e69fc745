// The few places where oneDNN's v2 and v3 C++ APIs differ, for the kernels that use them.
//
// ringtrain builds against oneDNN 2.6 and later 2.x (Debian 12: 2.6.3) and 3.x (Debian 13:
// 3.7.2; Ubuntu 24.04 has 3.x too). What changed in 3.0, and what the kernels see instead:
//   - Op descriptors are gone: a primitive descriptor is made from the engine and the memory
//     descriptors directly. make_matmul_pd() hides the two spellings.
//   - Output scales are gone: a scale is set per argument (a mask on the attributes) and its
//     value is passed as a memory argument at execution time, not baked into the primitive.
//     OutputScale keeps the value beside the primitive and adds the argument where 3.x needs it.
//     In both versions dst = alpha * (A B), then the post-ops (a sum of beta * dst).
//   - The primitive cache, scratchpad modes, memory descriptors with strides, post-ops sums and
//     streams are the same, so nothing else here differs.
// Nothing outside kernels/ includes this: the rest of ringtrain sees rt::kernels::gemm only.
#pragma once
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

// The range meson.build accepts, checked again in case the headers differ from the library.
#if DNNL_VERSION_MAJOR < 2 || (DNNL_VERSION_MAJOR == 2 && DNNL_VERSION_MINOR < 6) || DNNL_VERSION_MAJOR > 3
#error "ringtrain needs oneDNN 2.6 or later 2.x, or 3.x; install libdnnl-dev from your release"
#endif

namespace rt::kernels::dnnl_compat {

inline constexpr bool kV3 = DNNL_VERSION_MAJOR >= 3;

// The matmul primitive descriptor for src [.., M, K] x weights [.., K, N] -> dst [.., M, N].
inline dnnl::matmul::primitive_desc make_matmul_pd(const dnnl::engine& eng,
                                                   const dnnl::memory::desc& src,
                                                   const dnnl::memory::desc& weights,
                                                   const dnnl::memory::desc& dst,
                                                   const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::matmul::primitive_desc(eng, src, weights, dst, attr);
#else
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr, eng);
#endif
}

// A scalar multiplier of the product (dst = alpha * A B before post-ops). Set it on the
// attributes before the primitive descriptor is made; add_args() at every execution.
class OutputScale {
 public:
  OutputScale() = default;
  OutputScale(float alpha, const dnnl::engine& eng) : alpha_(alpha) {
#if DNNL_VERSION_MAJOR >= 3
    // 3.x reads the scale from a memory argument: one f32 that lives as long as the primitive.
    if (alpha_ != 1.0f) {
      value_ = dnnl::memory({{1}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::x}, eng);
      *static_cast<float*>(value_.get_data_handle()) = alpha_;
    }
#else
    (void)eng;
#endif
  }

  void set_on(dnnl::primitive_attr& attr) const {
    if (alpha_ == 1.0f) return;
#if DNNL_VERSION_MAJOR >= 3
    attr.set_scales_mask(DNNL_ARG_SRC, 0);  // one scale for the whole source
#else
    attr.set_output_scales(0, {alpha_});
#endif
  }

  void add_args(std::unordered_map<int, dnnl::memory>& args) const {
#if DNNL_VERSION_MAJOR >= 3
    if (alpha_ != 1.0f) args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, value_);
#else
    (void)args;
#endif
  }

 private:
  float alpha_ = 1.0f;
#if DNNL_VERSION_MAJOR >= 3
  dnnl::memory value_;
#endif
};

}  // namespace rt::kernels::dnnl_compat
