// The floating-point control bits behind flush_subnormals_to_zero(): see the header for why.
#include "ringtrain/kernels/subnormals.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace rt::kernels {

#if defined(__x86_64__) || defined(__i386__)
namespace {
constexpr unsigned kFlushToZero = 1u << 15;       // MXCSR.FTZ: subnormal results become 0
constexpr unsigned kDenormalsAreZero = 1u << 6;   // MXCSR.DAZ: subnormal inputs read as 0
}  // namespace

void flush_subnormals_to_zero() { _mm_setcsr(_mm_getcsr() | kFlushToZero | kDenormalsAreZero); }
bool subnormals_flushed() {
  const unsigned both = kFlushToZero | kDenormalsAreZero;
  return (_mm_getcsr() & both) == both;
}
#elif defined(__aarch64__)
namespace {
constexpr unsigned long kFpcrFlushToZero = 1ul << 24;  // FPCR.FZ
unsigned long read_fpcr() {
  unsigned long v;
  asm volatile("mrs %0, fpcr" : "=r"(v));
  return v;
}
}  // namespace

void flush_subnormals_to_zero() {
  const unsigned long v = read_fpcr() | kFpcrFlushToZero;
  asm volatile("msr fpcr, %0" : : "r"(v));
}
bool subnormals_flushed() { return (read_fpcr() & kFpcrFlushToZero) != 0; }
#else
void flush_subnormals_to_zero() {}
bool subnormals_flushed() { return false; }
#endif

}  // namespace rt::kernels
