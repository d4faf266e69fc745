"""Process-level helpers shared by bench and train-ddp: BLAS check, threads, memory."""
import resource
import sys

import torch


class BlasError(Exception):
    """torch is linked to a slow BLAS; measuring would be meaningless."""


def loaded_blas_libraries():
    """Paths of BLAS libraries mapped into this process, after forcing one matmul."""
    a = torch.randn(64, 64)
    (a @ a).sum().item()
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "blas" in parts[-1].lower():
                paths.add(parts[-1])
    return sorted(paths)


def require_openblas():
    """Print torch's BLAS configuration to stderr; raise BlasError unless OpenBLAS is in use."""
    libs = loaded_blas_libraries()
    info = [s for s in torch.__config__.show().replace(",", "\n").splitlines() if "BLAS_INFO" in s]
    print(f"torch {torch.__version__} {info[0].strip() if info else 'BLAS_INFO=?'}; loaded: {', '.join(libs) or 'none'}",
          file=sys.stderr)
    if not any("openblas" in p.lower() for p in libs):
        raise BlasError(f"torch uses {libs[0] if libs else 'an unknown BLAS'}, not OpenBLAS (the reference BLAS runs "
                        "at ~5 GFLOP/s); install libopenblas0-openmp so libblas.so.3 points to OpenBLAS")
    return libs


def peak_rss_mb():
    """Peak resident set size of this process in MB (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
