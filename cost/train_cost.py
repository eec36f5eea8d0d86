"""Time and cost to train: a plan's iteration time carried to the job's whole token budget.

With `job.train_tokens` = T tokens, a global batch of B sequences of S tokens and a plan whose
iteration takes t seconds:

    iterations  n = ceil(T / (B * S))          (a run takes whole optimizer steps)
    time        n * t                          seconds of wall clock
    GPU-hours   n * t * G / 3600               G = every GPU of the cluster, idle ones included
                                               (a run holds the whole cluster it was planned on)
    cost        n * t * sum_k G_k * p_k        p_k = job.usd_per_gpu_hour of GPU type k, per second

The prediction interval of the iteration time (cost/trust.py: measured time likely in
[t_lo, t_hi]) scales all three alike: each end is the same formula with t_lo or t_hi for t.
Nothing here changes a plan: the planner minimises t, and n and the prices are constants.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from paraplan.cost import units
from paraplan.cost.specs import JobSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainCost:
    """The whole training run a plan implies: iterations, time and price."""
    train_tokens: float  # job.train_tokens
    tokens_per_iteration: int  # global batch x sequence length
    iterations: int  # ceil(train_tokens / tokens_per_iteration)
    num_gpus: int  # every GPU of the cluster
    iter_time_s: float  # the plan's predicted iteration
    iter_interval_s: tuple[float, float] | None  # its trust interval; None: none published
    usd_per_s: float | None  # the whole cluster's price per second of wall clock; None: unpriced

    @property
    def time_s(self) -> float:
        return self.iterations * self.iter_time_s

    @property
    def time_interval_s(self) -> tuple[float, float] | None:
        return self._ends(self.time_s)

    @property
    def gpu_hours(self) -> float:
        return self.time_s * self.num_gpus / units.HOUR_S

    @property
    def gpu_hours_interval(self) -> tuple[float, float] | None:
        return self._ends(self.gpu_hours)

    @property
    def cost_usd(self) -> float | None:
        return None if self.usd_per_s is None else self.time_s * self.usd_per_s

    @property
    def cost_interval_usd(self) -> tuple[float, float] | None:
        return None if self.usd_per_s is None else self._ends(self.cost_usd)

    def _ends(self, value: float) -> tuple[float, float] | None:
        """The (low, high) ends of a quantity proportional to the iteration time."""
        if self.iter_interval_s is None:
            return None
        lo, hi = self.iter_interval_s
        return value * lo / self.iter_time_s, value * hi / self.iter_time_s


def gpus_by_type(cluster) -> dict[str, int]:
    """{GPU type: GPUs} of a cluster (cost/specs.Cluster), several groups of one type summed."""
    out: Counter[str] = Counter()
    for g in cluster.groups:
        out[g.gpu.name] += g.num_gpus
    return dict(out)


def train_cost(job: JobSpec, seq_len: int, gpus: dict[str, int], iter_time_s: float,
               iter_interval_s: tuple[float, float] | None = None) -> TrainCost | None:
    """The time, GPU-hours and cost of training `job` (module docstring) with a plan of
    `iter_time_s` per iteration on a cluster of `gpus` ({GPU type: count}); None when the job
    gives no train_tokens. The loaders have checked that the prices name exactly these types."""
    if job.train_tokens is None:
        return None
    tokens_per_iteration = job.global_batch * seq_len
    prices = dict(job.usd_per_gpu_s)
    usd_per_s = sum(n * prices[name] for name, n in gpus.items()) if prices else None
    return TrainCost(train_tokens=job.train_tokens, tokens_per_iteration=tokens_per_iteration,
                     iterations=_ceil_div(job.train_tokens, tokens_per_iteration),
                     num_gpus=sum(gpus.values()), iter_time_s=iter_time_s,
                     iter_interval_s=iter_interval_s, usd_per_s=usd_per_s)


def _ceil_div(tokens: float, per_iteration: int) -> int:
    """ceil(tokens / per_iteration), exact for a whole number of tokens (a float quotient may
    land one step past an exact division)."""
    if float(tokens).is_integer():
        return -(-int(tokens) // per_iteration)
    return math.ceil(tokens / per_iteration)


def instance_train_cost(inst, iter_time_s: float | None,
                        iter_interval_s: tuple[float, float] | None = None) -> TrainCost | None:
    """train_cost of a plan of `iter_time_s` per iteration on `inst` (its job, model and
    cluster); None without a plan (`iter_time_s` None)."""
    if iter_time_s is None:
        return None
    return train_cost(inst.job, inst.model.seq_len, gpus_by_type(inst.cluster), iter_time_s,
                      iter_interval_s)
