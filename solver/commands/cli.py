"""`paraplan` command line. Each sub-command lives in a small function; bad input exits 2 with
one line naming the file, field and fix, never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.formulations.result import SolverError
from paraplan.solver.commands.inputs import add_instance_args, load_from_args, read_calibration_files
from paraplan.solver.commands.jsonout import emit_json as _emit_json

EXIT_BAD_INPUT = 2
EXIT_SOLVER = 3  # a solver backend is missing or crashed
EXIT_DOES_NOT_FIT = 1  # simulate: the plan is valid but does not fit memory


def cmd_simulate(args) -> int:
    from paraplan.cost.loader import load_plan
    from paraplan.cost.simulate import simulate
    from paraplan.solver.commands import hetero as hetero_commands
    from paraplan.solver.format import breakdown_json, breakdown_text, gib

    if hetero_commands.group_route(args, simulate_only=True) or _group_plan_file(args.plan):
        return hetero_commands.cmd_simulate(args)
    inst = load_from_args(args, simulate_only=True)
    plan = load_plan(args.plan, inst)
    try:
        bd = simulate(inst, plan)
    except ConfigError as e:
        raise InstanceError(args.plan, "plan", str(e), "make the plan consistent with the instance")
    from paraplan.cost.model_notes import model_warnings
    notes = model_warnings(inst, plan)
    if args.json:
        _emit_json({"status": "fits" if bd.fits else "out_of_memory", "iter_time_s": bd.iter_time_s,
                    "breakdown": breakdown_json(bd), "model_warnings": notes})
    else:
        print(f"{inst.name}: {inst.model.name} on {inst.cluster.num_gpus} x {inst.cluster.gpu.name}")
        for line in notes:
            print(f"warning     model: {line}")
        print(breakdown_text(bd))
    if not bd.fits:  # the numbers above are still shown: they say by how much
        over = [s for s in bd.stages if s.mem_bytes > s.capacity_bytes]
        print("paraplan: the plan does not fit memory: " + "; ".join(
            f"stage {s.stage} needs {gib(s.mem_bytes)} of {gib(s.capacity_bytes)} usable"
            for s in over), file=sys.stderr)
        return EXIT_DOES_NOT_FIT
    return 0


def _group_plan_file(path: str) -> bool:
    """The plan file lists replica classes (the group format), which the class simulator reads
    on a one-group cluster too (cost/hetero_loader.load_hetero_plan)."""
    from paraplan.cost.loader import is_group_plan_mapping, read_yaml
    return is_group_plan_mapping(read_yaml(path))


def _finite(x: float | None) -> float | None:
    """JSON has no NaN: an undefined statistic is null."""
    return None if x is None or x != x else x


def cmd_accuracy(args) -> int:
    from paraplan.cost.calibration import mape, predict_rows
    from paraplan.cost.trust import accuracy_tables, group_stats, ranking_pairs, residuals
    from paraplan.solver.format import table

    rows, label = read_calibration_files(args.file)
    try:
        results = predict_rows(rows)
        res = residuals(rows, results)
        pairs = ranking_pairs(rows, results)
    except (KeyError, TypeError) as e:
        raise InstanceError(label, f"row field {e}", "missing or of the wrong type",
                            "follow shared/calibration/README.md's schema")
    modelled = [r for r in results if r.error is not None]
    skipped = [r for r in results if r.error is None]
    by_gpu = defaultdict(list)
    for r in modelled:
        by_gpu[r.gpu].append(r)
    tables = accuracy_tables(res)
    overall = group_stats(res) if res else None
    wrong = [p for p in pairs if not p.right]
    moe = moe_anchor_prices() if args.moe else []
    if args.json:
        _emit_json({
            "files": label.split(", "),
            "rows": [{"id": r.id, "predicted_iter_time_s": r.predicted_iter_time_s,
                      "measured_iter_time_s": r.measured_iter_time_s, "error": r.error,
                      "fits_memory": r.fits_memory} for r in modelled],
            "mape": _finite(mape(results)),
            "bias": overall.bias if overall else None,
            "mape_by_gpu": {g: _finite(mape(rs)) for g, rs in sorted(by_gpu.items())},
            "by_feature": {cut: {g: {"rows": s.rows, "mape": s.mape, "bias": s.bias}
                                 for g, s in groups.items()} for cut, groups in tables.items()},
            "ranking": {"right": len(pairs) - len(wrong), "total": len(pairs),
                        "wrong": [{"faster_measured": p.first, "slower_measured": p.second,
                                   "measured_s": list(p.measured_s), "predicted_s": list(p.predicted_s)}
                                  for p in wrong]},
            "not_modelled": [{"id": r.id, "reason": r.reason} for r in skipped],
            "status": "ok" if modelled else "no_rows",
            **({"moe_anchors": [dict(vars(a)) for a in moe],
                "moe_head_to_heads": moe_head_to_heads_json(moe)} if args.moe else {}),
        })
        return 0
    print(table(["row", "gpu", "predicted", "measured", "error", "fits memory"],
                [[r.id, r.gpu, f"{r.predicted_iter_time_s:.3f} s", f"{r.measured_iter_time_s:.3f} s",
                  f"{100 * r.error:+.1f}%", "yes" if r.fits_memory else "NO (model says OOM)"]
                 for r in modelled], align="llrrrl"))
    for cut, groups in tables.items():
        print()
        print(table([cut, "rows", "MAPE", "bias"],
                    [[g, str(s.rows), f"{100 * s.mape:.1f}%", f"{100 * s.bias:+.1f}%"]
                     for g, s in groups.items()]))
    print(f"\nranking: {len(pairs) - len(wrong)} / {len(pairs)} pairs of the same workload (measured"
          " times more than 5% apart) ordered right")
    for p in wrong:
        print(f"  wrong: {p.first} measured {p.measured_s[0]:.3f} s < {p.second} {p.measured_s[1]:.3f} s,"
              f" predicted {p.predicted_s[0]:.3f} s vs {p.predicted_s[1]:.3f} s")
    for r in skipped:
        print(f"not modelled: {r.id}: {r.reason}")
    oom = sum(1 for r in modelled if not r.fits_memory)
    bias = f", bias {100 * overall.bias:+.2f}%" if overall else ""
    print(f"\nMAPE {100 * mape(results):.2f}%{bias} over {len(modelled)} rows"
          f" ({len(skipped)} not modelled; {oom} predicted not to fit memory although they ran)")
    if args.moe:
        print()
        print(moe_anchor_text(moe))
    return 0


def moe_anchor_prices():
    from paraplan.cost.moe_anchors import price, priced_rows
    return [price(r) for r in priced_rows()]


def moe_anchor_text(moe) -> str:
    from paraplan.solver.format import table
    errs = [a.error_pct for a in moe if not a.host_bound]
    return "\n".join([
        "mixture-of-experts anchors, each published configuration priced as it ran"
        " (cost/published/moe.yaml; reported, never fitted):",
        table(["anchor", "gpu", "published TF/GPU", "paraplan TF/GPU", "iteration", "error", "fits memory"],
              [[a.id, a.gpu, f"{a.published_tflops_per_gpu:,.1f}", f"{a.megatron_tflops_per_gpu:,.1f}",
                f"{a.iter_time_s:.2f} s", f"{a.error_pct:+.1f}%", "yes" if a.fits_memory else "NO"]
               for a in moe], align="llrrrrl"),
        f"{len(moe)} anchors (error > 0: paraplan faster than measured); the {len(errs)} not bound by"
        f" host-side work: mean {sum(errs) / len(errs):+.1f}%, mean |error| {sum(map(abs, errs)) / len(errs):.1f}%"
        " (TF/GPU: model TFLOP/s per GPU as Megatron-LM logs it)"]
        + [f"  on {d}: {len(e)} anchors, mean {sum(e) / len(e):+.1f}%, mean |error| {sum(map(abs, e)) / len(e):.1f}%"
           for d, e in _by_die([(a.gpu, a.error_pct) for a in moe if not a.host_bound])]
        + _head_to_head_lines(moe))


def _head_to_head_lines(moe) -> list[str]:
    """The published tables' head-to-heads (cost/moe_anchors.head_to_heads): how many pairs of
    configurations paraplan orders as they were measured, and each one it orders wrong."""
    from paraplan.cost.moe_anchors import head_to_heads
    pairs = head_to_heads(moe)
    lines = [f"head-to-heads: {sum(p.right for p in pairs)} / {len(pairs)} pairs of one published"
             " table (published TF/GPU more than 5% apart) ordered right"]
    for p in pairs:
        if not p.right:
            lines.append(f"  wrong: {p.faster} measured {p.published_tflops_per_gpu[0]:,.0f} >"
                         f" {p.slower} {p.published_tflops_per_gpu[1]:,.0f} TF/GPU, priced"
                         f" {p.paraplan_tflops_per_gpu[0]:,.1f} vs {p.paraplan_tflops_per_gpu[1]:,.1f}")
    return lines


def moe_head_to_heads_json(moe) -> dict:
    from paraplan.cost.moe_anchors import head_to_heads
    pairs = head_to_heads(moe)
    return {"right": sum(p.right for p in pairs), "total": len(pairs),
            "wrong": [{"faster_measured": p.faster, "slower_measured": p.slower,
                       "published_tflops_per_gpu": list(p.published_tflops_per_gpu),
                       "paraplan_tflops_per_gpu": list(p.paraplan_tflops_per_gpu)}
                      for p in pairs if not p.right]}


def _by_die(pairs):
    from paraplan.cost.fit import die
    out: dict[str, list[float]] = {}
    for gpu, e in pairs:
        out.setdefault(die(gpu), []).append(e)
    return sorted(out.items())


def version() -> str:
    """The installed distribution's version (pyproject.toml), without importing anything heavy."""
    from importlib.metadata import PackageNotFoundError, version as dist_version
    try:
        return dist_version("paraplan")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="paraplan", description="Provably optimal parallel training plans.")
    p.add_argument("--version", action="version", version=f"paraplan {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("simulate", help="predict one iteration of a given plan")
    add_instance_args(s)
    s.add_argument("--plan", required=True, help="plan YAML (as written by `paraplan plan -o`)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_simulate)

    a = sub.add_parser("accuracy", help="predict published runs: MAPE, bias per source family and"
                       " feature, ranking of plans of one workload")
    a.add_argument("file", nargs="*", help="rows in the schema of shared/calibration/README.md"
                   " (default: both bundled files, cost/published/)")
    a.add_argument("--json", action="store_true")
    a.add_argument("--moe", action="store_true",
                   help="also price the mixture-of-experts anchors of cost/published/moe.yaml as they"
                        " ran, beside the published model TFLOP/s per GPU (reported, never fitted)")
    a.set_defaults(func=cmd_accuracy)

    from paraplan.solver.commands import planning as commands
    from paraplan.solver.commands import export as export_cmd
    from paraplan.solver.commands import extra as extra_commands
    from paraplan.solver.commands import partitions as partition_cmd
    from paraplan.solver.report import page as report
    from paraplan.solver.sweep import run as sweep
    commands.register(sub)
    extra_commands.register(sub)
    export_cmd.register(sub)
    partition_cmd.register(sub)
    report.register(sub)
    sweep.register(sub)
    return p


class StdoutError(Exception):
    """Writing the standard output failed (a full disk, a quota, a vanished terminal). Not an
    OSError, so that no handler meant for an input or output file can mistake it for one."""

    def __init__(self, err: OSError):
        self.strerror = err.strerror or type(err).__name__
        super().__init__(self.strerror)


class _GuardedStdout:
    """sys.stdout while a command runs: an OSError writing or flushing it becomes StdoutError,
    whichever command, printer or JSON writer met it. A closed pipe stays BrokenPipeError (a
    reader that stopped early, `| head`, is no error)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _discard_stdout() -> None:
    """Point the standard output at /dev/null, so that the interpreter's last flush of what is
    still buffered fails no more (it would print a traceback-like warning and exit 120)."""
    import os
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (captured in tests): nothing to flush
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stdout = sys.stdout
    sys.stdout = _GuardedStdout(stdout)
    try:
        return _run(args)
    finally:
        sys.stdout = stdout


def _run(args) -> int:
    try:
        from paraplan.solver.commands.limits import check_args
        check_args(args)
        code = args.func(args)
        sys.stdout.flush()  # a full disk often shows only here, when the buffer is written
        return code
    except InstanceError as e:
        print(f"paraplan: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StdoutError as e:
        print(f"paraplan: error: <stdout>: standard output: cannot be written ({e.strerror}), the"
              " result is lost (fix: free some space, or redirect the output to another file)",
              file=sys.stderr)
        _discard_stdout()
        return EXIT_BAD_INPUT
    except SolverError as e:
        other = "milp" if getattr(args, "backend", "dp") in ("cpsat", "dp") else "cpsat"
        print(f"paraplan: solver error: {e} (try --backend {other})".replace("\n", " "), file=sys.stderr)
        return EXIT_SOLVER
    except KeyboardInterrupt:
        print("paraplan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (e.g. `paraplan plan --json | head`)
        _discard_stdout()
        return 0


if __name__ == "__main__":
    sys.exit(main())
