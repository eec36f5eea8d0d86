"""Full readings of cost/: what the product's own readings are checked against."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from paraplan.cost import moe_anchors
from paraplan.cost.asymmetric import AsymmetricCoefficients, mem_bytes
from paraplan.cost.flops import LayerMatmuls
from paraplan.cost.trust import Features, Residual, _pool_quantile_factor, _scale_factor, band_pool


def asymmetric_fits(ac: AsymmetricCoefficients, n: np.ndarray, r: np.ndarray) -> np.ndarray:
    """(from cost/asymmetric.py, fits) Whether splits n with r recomputed layers fit every
    stage's memory."""
    return (mem_bytes(ac, n, r) <= ac.rows.capacity_bytes).all(axis=-1)


def qkv(mms: LayerMatmuls) -> float:
    """(from cost/flops.py, LayerMatmuls.qkv) The attention's input projections together."""
    return sum(mms.attn_in)


def log_error(a: moe_anchors.AnchorPrice) -> float:
    """(from cost/moe_fit.py, _log_error) ln(predicted / measured model TFLOP/s per GPU): > 0
    when paraplan is faster."""
    return math.log(a.megatron_tflops_per_gpu / a.published_tflops_per_gpu)


def quantile_factor(f: Features, quantile: float, res: Sequence[Residual]) -> float:
    """(from cost/trust.py) predicted time at `quantile` / predicted time: the measured time
    stays below predicted * this in a `quantile` share of the out-of-sample residuals
    band_pool gives f (family-weighted, as the interval): exp(-r_(1 - quantile)), or the
    scale axis's factor (_scale_factor) where that reaches farther on the slow side."""
    factor, scale = _pool_quantile_factor(band_pool(f, res)[0], quantile), _scale_factor(f, res, quantile)
    return factor if scale is None else max(factor, scale)


def regions(text: str) -> list[str]:
    """(from cost/docs/regions.py) The names of the generated regions in `text`, in order."""
    return re.findall(r"<!-- BEGIN generated ([\w.-]+): ", text)
