"""The published rows' facts that every plan's trust band and quantile objective read, derived
once and stored: `python -m paraplan.cost.trust_table` writes cost/published/trust_table.json,
`--check` writes nothing and exits 1 where the stored table is not what the rows give now.

What is stored (cost/trust.py reads it: published_residuals, _pool_facts,
published_memory_fractions, mfu_records): each bundled published row's out-of-sample residual
with the features that group it, its distance level and whether its die was fitted (judged
among the other families' rows: trust.pool_facts), the rows' memory fills by scale band, and
the best measured MFU per GPU die and precision at scale. Deriving them joins three data files
(the published rows, ran.yaml's facts, crossval.yaml's stored predictions), checks every row,
reads each row's framework release, judges 83 distinct rows' features against the others' and
prices each row's MFU: 0.11e9 instructions of every plan, and 0.04e9 more to import the
readers, 6% of `paraplan plan` on GPT-3 175B (issue 33), for numbers that change only when a
data file or the cost model does. The table holds exactly the numbers the derivation gives
(JSON writes each float as its shortest repr, which reads back equal), so a plan is byte for
byte what it was.

When to run it: after any change to cost/published/*.yaml, to how a row's features, release,
memory fill or MFU are read (cost/calibration.py, cost/trust.py, cost/releases.py,
cost/dies.py, cost/flops.py), or after `paraplan accuracy --cv --write` (which runs it
itself). tests/cost/test_trust_table.py derives the table again and fails, naming this
command, wherever the stored one differs.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, fields

from paraplan.cost.trust import (MFU_RECORD_MIN_GPUS, SCALE_BANDS, TRUST_TABLE, Features, Residual,
                                 measured_mfu, pool_facts, row_features, scale_band)
from paraplan.cost.dies import die

COMMAND = "python -m paraplan.cost.trust_table"
# Features' fields as a residual's row lists them (the table names them, so that a field added
# to Features makes the stored table stale rather than misread)
FEATURE_FIELDS = tuple(f.name for f in fields(Features) if f.init)


def derive_residuals() -> tuple[Residual, ...]:
    """The out-of-sample residuals of both bundled published files: cost/crossval.py's stored
    leave-one-family-out prediction of each row (nothing is simulated) with the row's features
    (trust.row_features) and its memory fill as crossval.yaml stores it."""
    from paraplan.cost.calibration import load_published
    from paraplan.cost.crossval import load_stored
    rows = {r["id"]: r for r in load_published()}
    stored = load_stored()
    return tuple(Residual(id=s.id, features=row_features(rows[s.id], s.full_recompute, s.memory_fill),
                          error=s.error)
                 for s in stored if s.error is not None and s.id in rows)


def derive_memory_fractions() -> dict[str, tuple[tuple[float, str], ...]]:
    """Scale band -> (peak_memory_fraction, id) of every bundled published row of that band
    priced as it ran (crossval.yaml's memory_fill), fullest first; bands without one left out.
    Stored as [band, fill, id] rows in that order."""
    from paraplan.cost.calibration import load_published
    from paraplan.cost.crossval import load_stored
    fills = {s.id: s.memory_fill for s in load_stored() if s.memory_fill is not None}
    out: dict[str, list[tuple[float, str]]] = {}
    for row in load_published():
        if row["id"] in fills:
            out.setdefault(scale_band(row["cluster"]["num_gpus"]), []).append((fills[row["id"]], row["id"]))
    return {label: tuple(sorted(out[label], reverse=True)) for _, _, label in SCALE_BANDS if label in out}


def derive_mfu_records() -> dict[tuple[str, str], tuple[float, str]]:
    """(GPU die, precision) -> (the best measured MFU among the published rows on
    MFU_RECORD_MIN_GPUS or more GPUs (trust.measured_mfu), that row's id)."""
    from paraplan.cost.calibration import load_published
    from paraplan.cost.readers.gpus import load_catalogue
    cat = load_catalogue()
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for row in load_published():
        if row["cluster"]["num_gpus"] < MFU_RECORD_MIN_GPUS:
            continue
        key = (die(row["cluster"]["gpu"]), row.get("precision", "bf16"))
        mfu = measured_mfu(row, cat)
        if mfu > best.get(key, (0.0, ""))[0]:
            best[key] = (mfu, row["id"])
    return best


def table_text() -> str:
    """The table as the rows give it now, as the file holds it: one residual per line."""
    def line(x) -> str:
        return json.dumps(x, ensure_ascii=False)

    res = derive_residuals()
    residuals = [[r.id, r.error, [asdict(r.features)[k] for k in FEATURE_FIELDS]] for r in res]
    levels, fitted = pool_facts(res)
    fractions = derive_memory_fractions()
    records = [[d, p, mfu, row_id] for (d, p), (mfu, row_id) in derive_mfu_records().items()]
    return "\n".join(
        ["{", f'"about": {line(f"generated by `{COMMAND}` from cost/published/*.yaml (cost/trust_table.py); do not edit")},',
         f'"feature_fields": {line(list(FEATURE_FIELDS))},',
         '"residuals": [', ",\n".join(line(r) for r in residuals), "],",
         '"pool_facts": [', ",\n".join(line([r.id, levels[r.id], fitted[r.id]]) for r in res), "],",
         '"memory_fractions": [', ",\n".join(line([b, fill, row_id]) for b, v in fractions.items()
                                              for fill, row_id in v), "],",
         '"mfu_records": [', ",\n".join(line(r) for r in records), "]", "}"]) + "\n"


def stale() -> bool:
    """Whether the stored table differs from what the rows give now."""
    return not TRUST_TABLE.exists() or TRUST_TABLE.read_text(encoding="utf-8") != table_text()


def write() -> None:
    TRUST_TABLE.write_text(table_text(), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    if argv:
        if stale():
            print(f"{TRUST_TABLE} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    write()
    print(f"wrote {TRUST_TABLE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
