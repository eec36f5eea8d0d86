"""Where Megatron-core builds each transformer layer: pipeline rank, model chunk, layer offset.

Read (never copied) from NVIDIA/Megatron-LM main at d98e8a64ddf3 (2026-08-22; megatron/core
0.20.0): get_num_layers_to_build (megatron/core/transformer/transformer_block.py),
get_transformer_layer_offset (megatron/core/transformer/transformer_layer.py),
TransformerConfig.__post_init__ (transformer_config.py) and validate_args
(megatron/training/arguments.py). Uneven first/last stages under interleaving and the
embedding/loss accounting arrived together in Megatron-core 0.11.0 (commit ef490839e8,
"Uneven Virtual Pipeline Parallelism", 2025-02-03); --pipeline-model-parallel-layout, which
places any count in any chunk, in 0.13.0 (commit 77732c3628, 2025-06-13).

Megatron's rules, for p pipeline ranks s = 0..p-1, v model chunks per rank (v = 1: no
interleaving) and L decoder layers:

R1 Order. Chunk c of rank s is piece k = c p + s of the model: the layers run through every
   rank's chunk 0, then every rank's chunk 1, and so on (offset = c x (layers in one pass over
   the ranks) + the layers of ranks 0..s-1 in that pass).
R2 Even split (no flag below): p | L, every rank L / p layers, v | L / p, every chunk L / (p v).
R3 First/last counts (--decoder-first-pipeline-num-layers F, --decoder-last-pipeline-num-layers
   F'; either or both): rank 0 holds F, rank p-1 holds F', the other ranks share the rest
   evenly: (L - F - F') divisible by their number; F, F' > 0; there are middle layers exactly
   when there are middle ranks. With v > 1 each of F, F' and the middle ranks' count is a
   multiple of v, and every chunk of a rank holds 1/v of its layers.
R4 Embedding/loss accounting (--account-for-embedding-in-pipeline-split,
   --account-for-loss-in-pipeline-split): the embedding (the loss) counts as one layer, so
   S = L + e + l slots (e, l in {0, 1}); p | S, v | S / p, every chunk holds S / (p v) slots.
   The embedding takes a slot of rank 0's chunk 0, the loss one of rank p-1's chunk v-1: those
   chunks build one decoder layer fewer (zero is allowed: a chunk of the embedding alone).
R5 R3 and R4 exclude each other (TransformerConfig raises ValueError), and both exclude the
   layout of R6.
R6 --pipeline-model-parallel-layout lists every chunk's layers (E, t*k, L), any counts.

paraplan's plan (cost/plan_specs.Plan) records the split as decoder layers per rank
(`layers_per_stage`) plus R4's two flags (`embedding_in_split`, `loss_in_split`). Its chunk rule
is R4 generalised to any per-rank count (R6 runs it): rank s carries n_s decoder layers plus its
slots (the embedding on rank 0, the loss on rank p-1, where flagged); v divides that total and
every chunk of the rank holds 1/v of it, the embedding's and the loss's chunk one decoder layer
fewer. Without flags this is the rule the planner has always used (v | n_s, n_s / v per chunk),
and R2 and R3 are special cases of it.
"""

from __future__ import annotations

from paraplan.cost.errors import ConfigError


def stage_slots(layers_per_stage, embedding: bool, loss: bool) -> tuple[int, ...]:
    """Per rank, its decoder layers plus the embedding (rank 0) and loss (last rank) slots
    that R4 counts as layers."""
    slots = [int(n) for n in layers_per_stage]
    slots[0] += int(embedding)
    slots[-1] += int(loss)
    return tuple(slots)


def chunk_problem(layers_per_stage, v: int, embedding: bool, loss: bool) -> str | None:
    """Why the split cannot be cut into v equal chunks per rank (module docstring), or None."""
    pp = len(layers_per_stage)
    if (embedding or loss) and pp == 1:
        return ("embedding_in_split / loss_in_split count the embedding or loss as a pipeline"
                " layer; with pp = 1 there is no pipeline split")
    for s, slots in enumerate(stage_slots(layers_per_stage, embedding, loss)):
        if slots % v:
            extra = ("" if slots == layers_per_stage[s] else
                     f" (its {layers_per_stage[s]} layers plus the "
                     + ("embedding and loss" if pp == 1 else "embedding" if s == 0 else "loss")
                     + " counted as a layer)")
            return (f"stage {s} holds {slots} layer slots{extra}, not a multiple of"
                    f" virtual_stages={v}: every model chunk of a stage holds as many")
    return None


def chunk_layers(layers_per_stage, v: int, embedding: bool = False,
                 loss: bool = False) -> tuple[tuple[int, ...], ...]:
    """Decoder layers of chunk c on rank s, [s][c] (module docstring: R4 generalised)."""
    problem = chunk_problem(layers_per_stage, v, embedding, loss)
    if problem:
        raise ConfigError(problem)
    pp = len(layers_per_stage)
    out = []
    for s, slots in enumerate(stage_slots(layers_per_stage, embedding, loss)):
        row = [slots // v] * v
        if s == 0 and embedding:
            row[0] -= 1
        if s == pp - 1 and loss:
            row[-1] -= 1
        out.append(tuple(row))
    return tuple(out)


def chunk_ranges(layers_per_stage, v: int, embedding: bool = False,
                 loss: bool = False) -> list[tuple[int, int, int, int]]:
    """(rank, chunk, first layer, layer count) of every chunk in model order k = c p + s (R1):
    the first layer is Megatron-core's get_transformer_layer_offset."""
    per = chunk_layers(layers_per_stage, v, embedding, loss)
    out, first = [], 0
    for c in range(v):
        for s in range(len(per)):
            out.append((s, c, first, per[s][c]))
            first += per[s][c]
    return out


def megatron_split(layers: int, pp: int, v: int = 1, *, first: int | None = None,
                   last: int | None = None, embedding: bool = False,
                   loss: bool = False) -> tuple[int, ...]:
    """The decoder layers per rank Megatron-core builds from its flags (R2-R5), or ConfigError
    saying which of its rules the flags break."""
    if (first is not None or last is not None) and (embedding or loss):
        raise ConfigError("Megatron-core refuses first/last stage layer counts together with the"
                          " embedding/loss accounting (TransformerConfig)")
    if pp == 1:
        if first is not None or last is not None or embedding or loss:
            raise ConfigError("first/last stage counts and the embedding/loss accounting need pp > 1")
        return (layers,)
    if embedding or loss:
        return _slot_split(layers, pp, v, embedding, loss)
    return _first_last_split(layers, pp, v, first, last)


def _slot_split(layers: int, pp: int, v: int, embedding: bool, loss: bool) -> tuple[int, ...]:
    """R4: the embedding and loss each take a layer slot on the first / last rank."""
    slots = layers + int(embedding) + int(loss)
    if slots % pp or (slots // pp) % v:
        raise ConfigError(f"{layers} layers + {int(embedding) + int(loss)} accounted = {slots}"
                          f" slots: Megatron-core needs them divisible by pp={pp} and each"
                          f" rank's {slots / pp:g} by virtual_stages={v}")
    split = [slots // pp] * pp
    split[0] -= int(embedding)
    split[-1] -= int(loss)
    if min(split) < 1:
        raise ConfigError(f"{slots} slots on {pp} stages leave a stage without a decoder layer")
    return tuple(split)


def _first_last_split(layers: int, pp: int, v: int, first: int | None,
                      last: int | None) -> tuple[int, ...]:
    """R2-R3: given first/last stage counts, the middle ranks share the rest evenly."""
    middle_ranks = pp - (first is not None) - (last is not None)
    middle = layers - (first or 0) - (last or 0)
    for name, count in (("first", first), ("last", last)):
        if count is not None and count <= 0:
            raise ConfigError(f"the {name} stage's layer count must be > 0")
        if count is not None and count % v:
            raise ConfigError(f"the {name} stage's {count} layers are not a multiple of"
                              f" virtual_stages={v} (Megatron-core: every chunk of a rank holds as many)")
    if bool(middle) != bool(middle_ranks) or middle < 0:
        raise ConfigError(f"{max(middle, 0)} layers are left for the {middle_ranks} middle stages"
                          " (Megatron-core: middle layers exactly when there are middle stages)")
    if middle_ranks and (middle % middle_ranks or (middle // middle_ranks) % v):
        raise ConfigError(f"the {middle} layers left for the {middle_ranks} middle stages do not"
                          f" split evenly into chunks of virtual_stages={v} on each")
    each = middle // middle_ranks if middle_ranks else 0
    split = [each] * pp
    if first is not None:
        split[0] = first
    if last is not None:
        split[-1] = last
    return tuple(split)


def chunk_items_held(held: int, pp: int, v: int, chunk: int) -> int:
    """How many of the first `held` forward passes of a rank run model chunk `chunk`: Megatron-
    core's interleaved schedule takes its micro-batches in groups of pp, group g on chunk g mod v
    (get_model_chunk_id, microbatch_group_size_per_vp_stage = pp by default)."""
    groups, rest = divmod(held, pp)
    full = sum(1 for g in range(groups) if g % v == chunk) * pp
    return full + (rest if groups % v == chunk else 0)


def slot_offsets(pp: int, embedding: bool, loss: bool) -> tuple[int, ...]:
    """Per stage, the layer slots the embedding and loss take (R4): stage s holding k_s chunks of
    equal slots holds v k_s - offset_s decoder layers. The search's split models (formulations/)
    and exhaustive search read the rule here, so every backend allows the same counts."""
    out = [0] * pp
    out[0] += int(embedding)
    out[-1] += int(loss)
    return tuple(out)


def stage_layer_counts(pp: int, v: int, slots: int, embedding: bool, loss: bool):
    """(pp, slots // v) int array: the decoder layers stage s holds with k = 1..slots // v chunks
    of v slots each (slot_offsets); slots = layers + the embedding's and loss's."""
    import numpy as np
    k = v * np.arange(1, slots // v + 1, dtype=np.int64)[None, :]
    return k - np.asarray(slot_offsets(pp, embedding, loss), np.int64)[:, None]


def short_chunk_factors(in_flight, v: int, embedding: bool, loss: bool):
    """Per stage, f_s of cost/schedule.uneven_chunk_mem_bytes: (in_flight_s - h_s) / in_flight_s,
    h_s the passes of the stage's short chunk among those it holds (chunk_items_held: stage 0's
    first chunk with the embedding slot, the last stage's last with the loss slot); 0 on a stage
    without one, or holding nothing."""
    import numpy as np
    in_flight = np.asarray(in_flight, float)
    pp = len(in_flight)
    out = np.zeros(pp)
    for s, chunk, on in ((0, 0, embedding), (pp - 1, v - 1, loss)):
        if not on or in_flight[s] == 0:
            continue
        held = int(round(in_flight[s] * v))
        out[s] += (in_flight[s] - chunk_items_held(held, pp, v, chunk)) / in_flight[s]
    return out


def slot_relief_bytes(in_flight, v: int, embedding: bool, loss: bool, act, ckpt):
    """Per stage, the most the short chunk's correction f_s ((n - r) act + r ckpt) / n can take
    off the linear memory terms: -f_s max(act, ckpt, 0) where f_s < 0 (stage 0 with the
    embedding slot holds fewer layer passes than its average prices); 0 elsewhere. A linear
    memory row whose stage term is lowered by it accepts every split that fits."""
    import numpy as np
    f = short_chunk_factors(in_flight, v, embedding, loss)
    return np.where(f < 0, -f * np.maximum(np.maximum(act, ckpt), 0), 0.0)
