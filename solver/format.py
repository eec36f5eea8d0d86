"""Human output: aligned tables and human units (ms, s, GiB, TFLOP/s)."""

from __future__ import annotations

import math

from paraplan.cost import units
from paraplan.cost.simulate import Breakdown
from paraplan.cost.units import bytes_to_gib


def seconds(t_s: float) -> str:
    if t_s < 1e-3:
        return f"{t_s * 1e6:.1f} us"
    if t_s < 1:
        return f"{t_s * 1e3:.1f} ms"
    return f"{t_s:.3f} s"


def count(n: int) -> str:
    """An exact integer of any size, short: 12,345 or 1.34e+52 (leading digits truncated).

    Integer arithmetic only: floats overflow past 1e308, and str() refuses integers of more
    than 4,300 digits (Python's int -> str limit), which a valid instance's plan count can have."""
    if n < 10**7:
        return f"{n:,}"
    exp = int(math.log10(n))  # a float estimate; corrected exactly below
    while 10**exp > n:
        exp -= 1
    while 10**(exp + 1) <= n:
        exp += 1
    lead = n // 10**(exp - 2)  # the three leading digits
    return f"{lead // 100}.{lead % 100:02d}e+{exp:02d}"


def gib(n_bytes: float) -> str:
    return f"{bytes_to_gib(n_bytes):.1f} GiB"


def band_text(interval_s) -> str:
    """A band of the measured time (cost/trust.plan_trust's interval_s) as 'lo .. hi', or '-'
    where no published row prices one: every table and line that shows the band."""
    return "-" if interval_s is None else f"{seconds(interval_s[0])} .. {seconds(interval_s[1])}"


def likely_text(interval_s) -> str:
    """The band after a predicted time, ' (likely measured lo .. hi, 80%)', or '' without one."""
    return "" if interval_s is None else f" (likely measured {band_text(interval_s)}, 80%)"


def table(headers: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """Columns right-aligned except where `align` has 'l' at that position."""
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(cells):
        return "  ".join(str(c).ljust(w) if a == "l" else str(c).rjust(w)
                         for c, w, a in zip(cells, widths, align)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def breakdown_text(bd: Breakdown) -> str:
    """A plan's breakdown as `plan`, `simulate` and `compare` print it, on every cluster: the
    critical path's parts, the throughput, the hidden communication, then one row per stage
    (of a DualPipe plan: per device); a plan of several classes also shows each class's
    pipeline, and the class and node group of each stage."""
    total = bd.iter_time_s
    rows = [[name, seconds(val), f"{100 * val / total:.1f}%"]
            for name, val in bd.exposed_s.items() if val > 0]
    several = len(bd.classes) > 1
    where = f"stage {bd.bottleneck_stage}" + (f" of class {bd.bottleneck_class + 1}" if several else "")
    lines = [f"iteration time {seconds(total)}   tokens/s {bd.tokens_per_s:,.0f}   MFU {100 * bd.mfu:.1f}%"
             f"   (bottleneck {where})"]
    if several or bd.idle_gpus:  # MFU counts every GPU of the cluster, idle ones too
        pipes = ", ".join(f"class {i + 1} {seconds(c.pipeline_time_s)}" for i, c in enumerate(bd.classes))
        lines.append(f"slowest pipeline {seconds(bd.pipeline_s)} ({pipes}) + sync/optimizer"
                     f" {seconds(bd.sync_s)}   idle GPUs {bd.idle_gpus}")
    parts = [table(["time on the critical path", "time", "share"], rows),
             "\n".join([*lines, megatron_tflops_line(bd.megatron_tflops_per_gpu)])]
    hidden = [[name, seconds(val)] for name, val in bd.overlapped_s.items() if val > 0]
    if hidden:
        parts.append(table(["overlapped (hidden) communication", "time"], hidden))
    groups = len({s.group for s in bd.stages}) > 1
    # (heading, alignment, cell of class i's stage s): the class and group only where they vary
    columns = [*([("class", "l", lambda i, s: str(i + 1))] if several else []),
               (bd.unit, "r" if several else "l", lambda i, s: str(s.stage)),
               *([("group", "l", lambda i, s: s.group)] if groups else []),
               ("layers", "r", lambda i, s: str(s.layers)),
               ("full recompute", "r", lambda i, s: str(s.full_recompute_layers)),
               ("time/micro-batch", "r", lambda i, s: seconds(s.time_per_micro_batch_s)),
               ("memory", "r", lambda i, s: gib(s.mem_bytes)),
               ("capacity", "r", lambda i, s: gib(s.capacity_bytes)),
               ("fits", "r", lambda i, s: "yes" if s.fits else "NO")]
    stage_rows = [[cell(i, s) for _, _, cell in columns] for i, k in enumerate(bd.classes) for s in k.stages]
    parts.append(table([h for h, _, _ in columns], stage_rows, align="".join(a for _, a, _ in columns)))
    return "\n\n".join(parts)


def megatron_tflops_line(tflops: float) -> str:
    """The throughput as NVIDIA's Megatron-core tables publish it, beside MFU (which counts
    attention whole, as PaLM does, where Megatron-LM counts its causal half)."""
    return (f"model TFLOP/s per GPU {tflops:,.1f} as Megatron-LM logs it (causal attention at half;"
            " the metric of NVIDIA's MoE tables)")


def breakdown_json(bd: Breakdown) -> dict:
    """A plan's breakdown as every `--json` writes it (solver/commands/schema.BREAKDOWN), one
    shape on every cluster: classes numbered from 1, each stage with its class (of a DualPipe
    plan, `unit` "device": each row a device holding two stages)."""
    return {
        "iter_time_s": bd.iter_time_s, "tokens_per_s": bd.tokens_per_s, "mfu": bd.mfu,
        "megatron_tflops_per_gpu": bd.megatron_tflops_per_gpu, "fits_memory": bd.fits,
        "pipeline_s": bd.pipeline_s, "sync_s": bd.sync_s, "idle_gpus": bd.idle_gpus,
        "bottleneck_class": bd.bottleneck_class + 1, "bottleneck_stage": bd.bottleneck_stage,
        "unit": bd.unit,
        "exposed_s": bd.exposed_s, "overlapped_s": bd.overlapped_s,
        "stages": [{"class": i + 1, "stage": s.stage, "group": s.group, "layers": s.layers,
                    "full_recompute_layers": s.full_recompute_layers,
                    "time_per_micro_batch_s": s.time_per_micro_batch_s, "sync_time_s": s.sync_time_s,
                    "mem_bytes": s.mem_bytes, "capacity_bytes": s.capacity_bytes}
                   for i, k in enumerate(bd.classes) for s in k.stages],
        "classes": [{"replicas": k.replicas, "num_micro_batches": k.num_micro_batches,
                     "pipeline_time_s": k.pipeline_time_s, "stage_groups": list(k.stage_groups)}
                    for k in bd.classes],
    }


def space_json(res, not_covered: list[str] = ()) -> dict:
    """How a SolveResult accounted for its declared space, as the JSON outputs write it
    (solver/commands/schema.SPACE); `not_covered`: the kinds of plan outside it
    (solver/space.not_covered)."""
    return {"outer_configs": res.outer_configs, "candidates": res.plans_total, "priced": res.priced,
            "solved": res.solved, "pruned_by_bound": res.pruned_by_bound,
            "pruned_by_memory": res.pruned_by_memory, "pruned_by_dominance": res.pruned_by_dominance,
            "inner_infeasible": res.inner_infeasible, "unresolved": res.unresolved,
            "not_covered": list(not_covered)}


def quantile_phrase(objective: str, predicted_s: float | None = None) -> str:
    """What a quantile objective's value is, for the evidence line ("" for `mean`)."""
    if objective == "mean":
        return ""
    pred = "" if predicted_s is None else f"; predicted {seconds(predicted_s)}"
    return f" at {objective} (under it in {objective[1:]}% of the model's out-of-sample errors){pred}"


def evidence_text(res, what: str, not_covered: list[str] = ()) -> str:
    """The optimality evidence `plan` prints of a SolveResult, on every cluster: its objective
    (what was minimised), `what` it measures, the quantisation tolerance of a proof that has one,
    `not_covered` the kinds of plan outside the space (solver/space.not_covered)."""
    value_s, dominated = res.quantile_s if res.quantile_s is not None else res.objective_s, res.pruned_by_dominance
    plans = res.plans_total
    claim = {"optimal": "OPTIMAL (proved over the declared space)",
             "feasible": "FEASIBLE (not proved optimal: time limit)",
             "infeasible": "INFEASIBLE (proved: no plan in the space fits)",
             "timeout": "TIMEOUT (no plan found within the time limit)"}[res.status]
    lines = [f"status      {claim}"]
    if value_s is not None:
        lines.append(f"objective   {seconds(value_s)} {what}")
    if res.bound_s is not None:
        lines.append(f"best bound  {seconds(res.bound_s)}   gap {100 * (res.gap or 0):.4f}%"
                     + (f"   (tolerance {res.tolerance_s:.2g} s)" if res.tolerance_s > 0 else ""))
    lines.append(f"backend     {res.backend}, {res.solve_time_s:.2f} s wall")
    lines.append(f"space       {res.outer_configs:,} outer configs, {count(plans)} plans in all;"
                 f" {res.priced:,} configs priced, {res.pruned_by_memory:,} proved infeasible by"
                 f" memory, {res.pruned_by_bound:,}"
                 f" pruned by lower bound, {res.solved:,} solved exactly"
                 f" ({res.inner_infeasible:,} infeasible), {res.unresolved:,} unresolved")
    if dominated:
        lines.append(f"            {dominated:,} (outer, layer plan) pairs dominated by"
                     " another layer plan of the same outer configuration")
    if not_covered:  # outside the space, so the claim says nothing of them
        lines.append(f"not covered plans with {'; '.join(not_covered)} (solver/space.py)")
    if res.reason:
        lines.append(f"reason      {res.reason}")
    return "\n".join(lines)


def duration(t_s: float) -> str:
    """A run's length: days from two days up, hours from one hour, minutes from one, else
    `seconds`."""
    return _duration_in(t_s, _duration_unit(t_s))


def _duration_unit(t_s: float) -> str:
    if t_s >= 2 * units.DAY_S:
        return "days"
    return "h" if t_s >= units.HOUR_S else "min" if t_s >= units.MINUTE_S else "s"


def _duration_in(t_s: float, unit: str) -> str:
    if unit == "days":
        return f"{t_s / units.DAY_S:,.1f} days"
    if unit == "h":
        return f"{t_s / units.HOUR_S:,.1f} h"
    if unit == "min":
        return f"{t_s / units.MINUTE_S:.1f} min"
    return seconds(t_s)


def _amount(x: float, like: float | None = None) -> str:
    """A count of GPU-hours: whole from 100 up, else 3 significant digits; `like`: the value
    whose format an interval's end takes, so both ends read alike."""
    return f"{x:,.0f}" if (x if like is None else like) >= 100 else f"{x:#.3g}"


def _usd(x: float, like: float | None = None) -> str:
    """Dollars: whole from $100 up, else cents; `like` as in _amount."""
    return f"${x:,.0f}" if (x if like is None else like) >= 100 else f"${x:,.2f}"


def train_cost_cells(tc) -> list[tuple[str, str]]:
    """(what, value) of a cost/train_cost.TrainCost: the time, GPU-hours and (priced) cost to
    train, each with its trust interval in brackets where there is one (tables: compare,
    report)."""
    unit = _duration_unit(tc.time_s)

    def with_ends(text: str, ends, shown) -> str:
        return text if ends is None else f"{text} ({shown(ends[0])} .. {shown(ends[1])})"
    cells = [("time to train", with_ends(duration(tc.time_s), tc.time_interval_s,
                                          lambda t: _duration_in(t, unit))),
             ("GPU-hours", with_ends(_amount(tc.gpu_hours), tc.gpu_hours_interval,
                                     lambda x: _amount(x, tc.gpu_hours)))]
    if tc.cost_usd is not None:
        cells.append(("cost", with_ends(_usd(tc.cost_usd), tc.cost_interval_usd,
                                        lambda x: _usd(x, tc.cost_usd))))
    return cells


def train_cost_lines(tc) -> list[str]:
    """What `plan` and `report` show of a cost/train_cost.TrainCost (none without one): the
    tokens and iterations, then the time, GPU-hours and cost to train, each with its trust
    interval in brackets where there is one."""
    if tc is None:
        return []
    tokens = f"{tc.train_tokens:.4g}" if tc.train_tokens >= 1e7 else f"{tc.train_tokens:,.0f}"
    cells = dict(train_cost_cells(tc))
    second = f"on {tc.num_gpus:,} GPUs: GPU-hours {cells['GPU-hours']}"
    if "cost" in cells:
        second += f", cost {cells['cost']}"
    return [f"{tokens} tokens = {tc.iterations:,} iterations of {tc.tokens_per_iteration:,} tokens:"
            f" {cells['time to train']}", second]


def train_cost_json(tc) -> dict | None:
    """A cost/train_cost.TrainCost as the JSON outputs write it (solver/commands/schema.TRAIN_COST);
    None without one. Intervals are [low, high] or null (no trust interval)."""
    if tc is None:
        return None

    def ends(pair):
        return None if pair is None else list(pair)
    return {"train_tokens": tc.train_tokens, "tokens_per_iteration": tc.tokens_per_iteration,
            "iterations": tc.iterations, "num_gpus": tc.num_gpus, "iter_time_s": tc.iter_time_s,
            "time_s": tc.time_s, "time_interval_s": ends(tc.time_interval_s),
            "gpu_hours": tc.gpu_hours, "gpu_hours_interval": ends(tc.gpu_hours_interval),
            "cost_usd": tc.cost_usd, "cost_interval_usd": ends(tc.cost_interval_usd)}


def train_lines(tc) -> list[str]:
    """train_cost_lines under a `train` label in the column layout of `plan`'s evidence."""
    return [("train" if i == 0 else "").ljust(12) + line for i, line in enumerate(train_cost_lines(tc))]


def trust_json(trust) -> dict | None:
    if trust is None:
        return None
    return {"interval_s": list(trust.interval_s) if trust.interval_s else None, "group": trust.group,
            "rows": trust.rows, "warnings": list(trust.warnings),
            "release": trust.release or None, "release_rows": trust.release_rows}


def trust_lines(trust) -> list[str]:
    if trust.interval_s is None:
        lines = ["trust       no published row to compare with: the prediction is unvalidated"]
    else:
        lines = [f"trust       measured time likely in {band_text(trust.interval_s)} (10th-90th percentile"
                 f" of the errors of {trust.rows} published rows: {trust.group})"]
    if trust.release:
        lines.append(f"release     {release_text(trust)}")
    lines += [f"warning     {w}" for w in trust.warnings]
    return lines


def grad_reduce_line(job) -> str:
    """The dtype the plan's gradients are kept and reduced in (JobSpec.grad_reduce): a fact of
    the job, never chosen by the planner, since it changes the numerics."""
    how = ("job.grad_reduce_dtype" if job.grad_reduce_dtype is not None
           else f"{job.framework.value}'s default; job.grad_reduce_dtype states another")
    return f"gradients   kept and reduced in {job.grad_reduce.value} ({how})"


def release_text(trust) -> str:
    """Which framework release the time is for, and how many published rows ran it."""
    ran = (f"{trust.release_rows} published row{'' if trust.release_rows == 1 else 's'} ran it"
           if trust.release_rows else "no published row ran it: the efficiencies are fitted to"
           " other releases, and the band counts the release as unvalidated")
    return f"the time is for {trust.release}; {ran}"
