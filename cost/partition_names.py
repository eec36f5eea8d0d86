"""The closed set of per-operator tensor partitions and the rules a plan's partitions must meet.

Split out of cost/partition.py (which prices them) so that `Plan` (cost/specs.py) can validate
its own `partitions` without importing the pricing code, which imports cost/specs.py: this
module imports nothing of cost/ but its errors. The names, candidates and rules are described
in cost/partition.py's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.cost.errors import ConfigError

LINEAR_OPS = ("qkv", "attn_out", "mlp_in", "mlp_out")
OPS = ("qkv", "attn_core", "attn_out", "mlp_in", "mlp_out")
# the residual stream's layout: one more choice of a layer plan (module docstring)
STREAM = "stream"
PLAN_OPS = OPS + (STREAM,)


@dataclass(frozen=True, slots=True)
class OpPartition:
    """Split the weight's `outer` dimension ("K" columns or "N" rows) over `outer_parts` slow
    ranks, then run P(q x q) on the fast ranks; `outer` is "P" for a bare grid (one part),
    "T" for a token split over all ranks (weights replicated, q = 1)."""

    outer: str
    outer_parts: int
    q: int

    def spec(self) -> str:
        if self.q == 1:
            return self.outer
        grid = f"P{self.q}x{self.q}"
        return grid if self.outer_parts == 1 else f"{self.outer}{self.outer_parts}*{grid}"

    def describe(self, group_link_names: tuple[str, str]) -> str:
        """Readable form, e.g. `K@nodes, P2x2@node` (where each part's ranks live)."""
        outer_where, inner_where = group_link_names
        if self.q == 1:
            return f"{self.outer}@{outer_where}"
        grid = f"P{self.q}x{self.q}@{inner_where}"
        return grid if self.outer_parts == 1 else f"{self.outer}@{outer_where}, {grid}"


# Head-to-GPU assignments of the attention core (every GPU holds t-th of the heads):
#   "heads"       GPU rho holds head chunk rho (Megatron)
#   "heads@P{q}"  GPU (w, r, c) holds chunk (w*q + c)*q + r: a sub-chunk of the column block a
#                 K-split P(q x q) producer leaves on it
#   "heads@P{q}s" GPU (w, r, c) holds chunk (w*q + (r+c) mod q)*q + r: a sub-chunk of the
#                 skewed input block an N-split P(q x q) consumer needs


def powers_of_two_squares(t: int) -> list[int]:
    """Grid sides q >= 2 with q^2 dividing t (t a power of two)."""
    out, q = [], 2
    while q * q <= t:
        if t % (q * q) == 0:
            out.append(q)
        q *= 2
    return out


def op_candidates(t: int, spatial_temporal: bool) -> list[OpPartition]:
    """Candidate partitions of a linear operator over t ranks, in a fixed order (Megatron first)."""
    if t == 1:
        return [OpPartition("K", 1, 1)]
    out = [OpPartition("K", t, 1), OpPartition("N", t, 1)]
    if spatial_temporal:
        for q in powers_of_two_squares(t):
            j = t // (q * q)
            out += [OpPartition("P", 1, q)] if j == 1 else [OpPartition("K", j, q), OpPartition("N", j, q)]
        out.append(OpPartition("T", t, 1))
    return out


def is_token_split(spec: str) -> bool:
    return spec == "T"


def token_split_allowed(o) -> bool:
    """T is not offered with ZeRO-3 (module docstring)."""
    return o.zero < 3


def plan_allowed(plan: dict[str, str], o) -> bool:
    return token_split_allowed(o) or not any(is_token_split(plan[op]) for op in LINEAR_OPS)


def core_candidates(t: int, spatial_temporal: bool) -> list[str]:
    out = ["heads"]
    if spatial_temporal:
        for q in powers_of_two_squares(t):
            out += [f"heads@P{q}", f"heads@P{q}s"]
    return out


MEGATRON_DEFAULT = {"qkv": "K", "attn_core": "heads", "attn_out": "N", "mlp_in": "K", "mlp_out": "N"}
# Megatron's stream layouts (without / with sequence parallelism); a plan that names no stream
# uses the one of its sequence_parallel flag
MEGATRON_STREAMS = ("replicated", "seq")


def stream_candidates(t: int, sequence_parallel: bool, spatial_temporal: bool) -> list[str]:
    """Stream layouts of a group of t (module docstring): Megatron's first; the block layouts
    only with a split stream (sequence_parallel) and spatial-temporal partitions."""
    if not sequence_parallel:
        return ["replicated"]
    out = ["seq"]
    if spatial_temporal:
        out += [f"B{q}x{q}" for q in powers_of_two_squares(t)]
    return out


def default_stream(sequence_parallel: bool) -> str:
    return "seq" if sequence_parallel else "replicated"


def stream_grid(name: str) -> int:
    """q of a block stream B{q}x{q}; 0 for Megatron's layouts."""
    return 0 if name in MEGATRON_STREAMS else int(name[1:].split("x")[0])


def parse_op(spec: str, t: int) -> OpPartition:
    """Inverse of OpPartition.spec for a group of t ranks; ValueError when not a candidate."""
    for cand in op_candidates(t, True):
        if cand.spec() == spec:
            return cand
    raise ValueError(f"unknown partition {spec!r} for a group of {t} GPUs; candidates: "
                     + ", ".join(c.spec() for c in op_candidates(t, True)))


# P(q x q) needs q^2 >= 4 ranks; above 32 ranks the cell grids (t^3 cells) grow large and no
# single-node or paper setting needs them: such groups keep the Megatron plan.
MAX_SPATIAL_TEMPORAL_GROUP = 32


def spatial_temporal_allowed(o) -> bool:
    """Whether per-operator plans beyond Megatron's are offered for this outer configuration."""
    return 4 <= o.tp <= MAX_SPATIAL_TEMPORAL_GROUP


def spec_of(c) -> str:
    return c if isinstance(c, str) else c.spec()


def is_megatron(plan: dict[str, str]) -> bool:
    return (all(plan.get(op) == MEGATRON_DEFAULT[op] for op in OPS)
            and plan.get(STREAM, "seq") in MEGATRON_STREAMS)


def stream_allowed(plan: dict[str, str], o) -> bool:
    """A block stream needs a split stream between layers (sequence_parallel); Megatron's
    stream must be the one of the flag."""
    s = plan.get(STREAM)
    return s is None or s == default_stream(o.sequence_parallel) or (
        o.sequence_parallel and s not in MEGATRON_STREAMS)


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerPlan:
    """What check_partitions reads of a plan, for one class and group (cost/plan_specs.py
    builds one per class and group it validates)."""

    partitions: tuple[tuple[str, str], ...]
    tp: int
    zero: int
    sequence_parallel: bool


def check_partitions(plan) -> None:
    """ConfigError unless `plan.partitions` names every operator once with a candidate of its
    tensor-parallel group (called by Plan's own validation)."""
    ops = [op for op, _ in plan.partitions if op != STREAM]
    if sorted(ops) != sorted(OPS) or len(plan.partitions) - len(ops) > 1:
        raise ConfigError("plan.partitions must name each of " + ", ".join(OPS)
                          + f" once (and optionally {STREAM})")
    if not stream_allowed(dict(plan.partitions), plan):
        raise ConfigError(f"plan.partitions.{STREAM}: {dict(plan.partitions)[STREAM]!r} needs"
                          " sequence_parallel: true (a block stream holds 1/tp of the stream"
                          " between layers; Megatron's layout is the flag's own)")
    if is_megatron(dict(plan.partitions)):
        return
    if not 4 <= plan.tp <= MAX_SPATIAL_TEMPORAL_GROUP:
        raise ConfigError(f"per-operator partitions need 4 <= tp <= {MAX_SPATIAL_TEMPORAL_GROUP}")
    if not plan_allowed(dict(plan.partitions), plan):
        raise ConfigError("plan.partitions: token splits (T) are not offered with zero: 3;"
                          " use zero 0, 1 or 2 or another partition")
    for op, spec in plan.partitions:
        if op == STREAM:
            allowed = stream_candidates(plan.tp, plan.sequence_parallel, True)
        elif op == "attn_core":
            allowed = [spec_of(c) for c in core_candidates(plan.tp, True)]
        else:
            allowed = [c.spec() for c in op_candidates(plan.tp, True)]
        if spec not in allowed:
            raise ConfigError(f"plan.partitions.{op}: {spec!r} is not a partition of tp={plan.tp};"
                              " use one of " + ", ".join(allowed))
