"""The one place where user-facing units become internal ones.

Internal units: seconds, bytes, FLOPs, FLOP/s, bytes/s. YAML keys carry their unit and are
converted here, once, at load time.
"""

GIB_BYTES = 1024**3
GBYTE_BYTES = 1e9
GBIT_BYTES = 1e9 / 8
TFLOPS_FLOPS = 1e12
GFLOP_FLOPS = 1e9
US_S = 1e-6
MS_S = 1e-3
MINUTE_S = 60.0
HOUR_S = 3600.0
DAY_S = 86400.0


def gib_to_bytes(gib: float) -> float:
    return gib * GIB_BYTES


def bytes_to_gib(n_bytes: float) -> float:
    return n_bytes / GIB_BYTES


def gbytes_per_s_to_bytes_per_s(gbytes_per_s: float) -> float:
    return gbytes_per_s * GBYTE_BYTES


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    return gbit_per_s * GBIT_BYTES


def tflops_to_flops_per_s(tflops: float) -> float:
    return tflops * TFLOPS_FLOPS


def us_to_s(us: float) -> float:
    return us * US_S


def gflop_to_flops(gflop: float) -> float:
    return gflop * GFLOP_FLOPS
