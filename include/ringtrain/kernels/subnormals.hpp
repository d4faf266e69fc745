// Subnormal floats (below 1.2e-38) flushed to zero in arithmetic, on this thread and every
// thread it starts afterwards (a new thread copies its creator's floating-point control).
//
// Why: x86 cores take a microcode assist, tens to hundreds of cycles, for every operation on
// a subnormal. In training they come from optimizer state decaying towards zero: the
// momentum of an MLP unit that no longer fires is multiplied by 0.95 every step and spends
// hundreds of steps in the subnormal range on its way. Measured in an hour-long run of d2
// (docs/benchmarks.md, the chaos soak on 8bb5d18): from about step 30,000, 18,585 of 65,536
// entries of block 0's c_fc momentum and 39,110 of its c_proj momentum were subnormal, one
// rank spent 0.80 CPUs where its peer on the same core spent 0.17 on the same steps, and
// flushing made resumed steps about 2x faster. Flushing changes only values below 1.2e-38, which no loss can see.
#pragma once

namespace rt::kernels {

// Sets flush-to-zero and denormals-are-zero (x86: MXCSR bits 15 and 6; AArch64: FPCR.FZ).
// Call it first thing in main(), before any thread is created.
void flush_subnormals_to_zero();

// Whether this thread flushes them (for the tests).
bool subnormals_flushed();

}  // namespace rt::kernels
