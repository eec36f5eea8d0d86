"""`paraplan partition`: the per-operator partition of one tensor-parallel group (cost/partition.py)."""

from __future__ import annotations

from paraplan.cost import partition as P


def _check_partition_args(args, inst) -> None:
    """`partition`'s refusals, each naming its argument: a model cost/partition.py prices, a
    micro-batch and cp in range, a tp that can carry per-operator partitions."""
    from paraplan.cost.errors import InstanceError
    from paraplan.cost.space_rules import per_operator_problem

    problem = per_operator_problem(inst.model)
    if problem is not None:  # as plan refuses search tensor_partitions: spatial_temporal
        raise InstanceError(inst.source, "model.mla" if inst.model.mla is not None else "model.moe",
                            f"{problem} (cost/partition.py prices dense layers of standard attention)",
                            "give `paraplan partition` a dense model of standard attention; plan"
                            " this one with tensor_partitions: [megatron]")
    for flag, value in (("--micro-batch", args.micro_batch), ("--cp", args.cp)):
        if value < 1 or value > inst.job.global_batch and flag == "--micro-batch":
            raise InstanceError("<arguments>", flag, f"must be from 1 to the global batch"
                                f" ({inst.job.global_batch}), got {value}" if flag == "--micro-batch"
                                else f"must be >= 1, got {value}", "give a positive integer")
    t, m = args.tp, inst.model
    if t < 4 or t > P.MAX_SPATIAL_TEMPORAL_GROUP or t & (t - 1) or inst.cluster.num_gpus % t \
            or m.heads % t or (m.kv_heads % t and t % m.kv_heads):
        raise InstanceError(inst.source, "--tp", f"tp={t} cannot carry per-operator partitions",
                            f"use a power of two from 4 to {P.MAX_SPATIAL_TEMPORAL_GROUP} that divides"
                            " the GPUs and the attention heads")
    if m.seq_len % args.cp:
        raise InstanceError(inst.source, "--cp", f"cp={args.cp} does not divide seq_len {m.seq_len}",
                            "use a divisor of the sequence length")


def cmd_partition(args) -> int:
    """`paraplan partition INSTANCE --tp T`: the per-layer partition problem of one tensor-parallel
    group, solved by the segmented DP (its whole Pareto front) and checked point by point by the
    MILP; exit 1 if they disagree."""
    import math

    from paraplan.cost.coefficients import homogeneous_placement
    from paraplan.cost.comm import NetEfficiency
    from paraplan.cost.errors import InstanceError
    from paraplan.cost.specs import Outer
    from paraplan.formulations.partition import solve_partition_milp
    from paraplan.formulations.result import SolverError
    from paraplan.formulations.partition_dp import pareto_front
    from paraplan.solver.format import gib, seconds, table
    from paraplan.solver.commands.jsonout import emit_json
    from paraplan.solver.commands.inputs import read_instance
    from paraplan.solver.partition_plans import problem_from_table

    inst = read_instance(args)
    _check_partition_args(args, inst)
    t = args.tp
    o = Outer(tp=t, pp=1, dp=1, cp=args.cp, micro_batch=args.micro_batch, num_micro_batches=1,
              sequence_parallel=args.sequence_parallel)
    site = homogeneous_placement(inst.cluster.one_group, o).sites[0]
    table_ = P.table_for(inst, o, site, NetEfficiency())
    pb = problem_from_table(table_)
    rows, agree = [], True
    for time_s, act, ws, params, sync_s, choice in pareto_front(pb):
        try:
            mi = solve_partition_milp(pb, act_cap_bytes=act, ws_cap_bytes=ws, params_cap=params,
                                      sync_cap_s=sync_s)
        except SolverError as e:  # numerically hopeless coefficients: say which input, one line
            raise InstanceError(inst.source, "cluster.gpu", f"the partition MILP cannot be solved"
                                f" with these figures ({e})", "check the GPU's and the links'"
                                " numbers against their datasheets") from None
        ok = mi.status == "optimal" and math.isclose(mi.time_s, time_s, rel_tol=1e-9)
        agree &= ok
        plan = {op: pb.labels[op][k] for op, k in choice.items()}
        rows.append({"time_s": time_s, "act_bytes": act, "workspace_bytes": ws,
                     "replicated_params": params, "grad_sync_s": sync_s, "plan": plan,
                     "milp_time_s": mi.time_s, "agree": ok})
    if args.json:
        emit_json({"status": "agree" if agree else "disagree", "tp": t, "micro_batch": args.micro_batch,
                   "cp": args.cp, "front": rows, "agree": agree})
    else:
        print(f"{inst.name}: one layer, micro-batch {args.micro_batch}, tp={t}, cp={args.cp}:"
              f" {len(rows)} Pareto-optimal per-operator plans (segmented DP), each re-solved by"
              " the MILP under the same memory caps")
        body = [[seconds(r["time_s"]), gib(r["act_bytes"]), gib(r["workspace_bytes"]),
                 f"{r['replicated_params'] / 1e6:.1f} M", seconds(r["grad_sync_s"]),
                 "yes" if r["agree"] else "NO",
                 ", ".join(f"{P.DISPLAY_NAMES[op]}={s}" for op, s in r["plan"].items())] for r in rows]
        print("(replicated params: weights that token-split (T) operators hold on every GPU of the"
              " group; grad sync: their weight-gradient all-reduce over the group, per iteration)")
        print(table(["layer time", "activations", "workspace", "replicated params", "grad sync",
                     "MILP agrees", "plan"], body))
        print("AGREE" if agree else "DISAGREE")
    return 0 if agree else 1


def register(sub) -> None:
    from paraplan.solver.commands.inputs import add_instance_args

    p = sub.add_parser("partition", help="per-layer Pareto front of per-operator tensor partitions"
                       " (segmented DP, checked by the MILP)")
    add_instance_args(p)
    p.add_argument("--tp", type=int, required=True, help="tensor-parallel group size (4 to 32)")
    p.add_argument("--micro-batch", type=int, default=1, dest="micro_batch")
    p.add_argument("--cp", type=int, default=1, help="context-parallel degree (default 1)")
    p.add_argument("--sequence-parallel", action="store_true", dest="sequence_parallel",
                   help="split residual stream: Megatron's sequence split or block layouts")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_partition)
