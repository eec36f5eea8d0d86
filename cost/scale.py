"""What grows with the number of GPUs a job synchronises: the slowest of many ranks.

Synchronous training waits for its slowest rank. Every tensor-parallel collective, every
pipeline hand-off and the gradient reduction are barriers, and the ranks are chained by them
across the whole job (a tp group's all-reduce, the dp replicas' gradient reduction, the stages'
sends), so an iteration lasts as long as the slowest GPU needs for its share. GPUs of one SKU do
not run alike: Sinha et al. (SC'22, arXiv 2208.11035, "Not All GPUs Are Created Equal") ran the
same compute-bound kernels on more than 90% of the GPUs of five clusters (Summit, Vortex,
Frontera, Longhorn, Corona; hundreds to 27,648 GPUs each) and found 8% average performance
variation between the GPUs of a cluster (up to 22%), from manufacturing variation under the
GPUs' power management, with outliers up to 1.5x slower than the median (a failing GPU, which
operators drain, not priced here).

Which N: every GPU of the job. The variation Sinha et al. measure is a GPU's own, so it persists
from one micro-batch to the next: a tensor-parallel group runs at its slowest member's pace, a
pipeline at its slowest stage's, and the gradient reduction after the last backward waits for
the slowest replica, so the step lasts as long as the slowest of all N GPUs needs. Taking N as
one tp group or one replica instead would price no growth when only the data-parallel degree
grows; MegaScale's 530B Megatron-LM runs (Jiang et al., NSDI'24, arXiv 2402.15627, Figure 9) ran
the same work per replica on 2,240 and 11,200 GPUs and took 2.07% longer at the larger scale
(priced 0.6% longer, about half of it this term's: tests/validation/test_scale_check.py,
docs/accuracy.md "One source at eleven scales", which also says why a larger sigma is not the
rest).

If a rank's speed varies about the mean with relative standard deviation sigma, the slowest of
N ranks needs (1 + sigma * E[max of N standard normals]) times the mean. E[max] grows like
sqrt(2 ln N) (Cramer 1946); for the N of real jobs Blom's approximation Phi^-1((N - 0.375) /
(N + 0.25)) is within 1% of the exact order statistic (Blom 1958; Royston 1982, Applied
Statistics 31(2), Table 1: 1.42 at N = 8 against sqrt(2 ln 8) = 2.04), so it is used here.

The range of sigma (cost/fit.py fits it): the 8% (22%) variation above is the spread between a
cluster's fastest and slowest GPU, about 2 E[max] sigma over the cluster's N (E[max] 3.0-4.1 for
N = 400-27,648): sigma 1.0-1.4% on average, 2.7-3.7% in the worst cluster. Per-iteration
jitter (garbage collection, kernel launch noise, network congestion: Lin et al., OSDI'25,
arXiv 2505.05713) adds to it, so the fitted range is 0.5-3.7%.
"""

from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

# Blom's plotting position for the largest of N (Blom 1958): alpha = 0.375
_BLOM_ALPHA = 0.375
_STANDARD_NORMAL = NormalDist()


@lru_cache(maxsize=1024)
def expected_max_standard_normal(n: int) -> float:
    """E[max of n independent standard normals] (Blom's approximation; 0 for one rank). Kept
    per n: every layer floor and stage term priced asks it for the job's rank count (GPT-3 175B
    / 1,024 A100: about 3,000 times per plan, each an inverse normal CDF)."""
    if n <= 1:
        return 0.0
    return _STANDARD_NORMAL.inv_cdf((n - _BLOM_ALPHA) / (n - 2 * _BLOM_ALPHA + 1))


def slowest_rank_fraction(n_ranks: int, rank_jitter_rel: float) -> float:
    """How much longer than the mean rank the slowest of `n_ranks` synchronised ranks needs,
    as a fraction of the mean (module docstring): sigma * E[max of N standard normals]."""
    return rank_jitter_rel * expected_max_standard_normal(n_ranks)
