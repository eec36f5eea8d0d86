"""How a sub-command names its instance: one instance YAML, separate parts, or both.

    paraplan plan instances/llama3-8b-64xH100.yaml
    paraplan plan --hf-config path/to/Meta-Llama-3-8B --cluster instances/clusters/h200-16nodes.yaml \\
                  --job instances/jobs/pretrain-4m-tokens.yaml --seq-len 8192
    paraplan plan instances/llama3-8b-64xH100.yaml --cluster instances/clusters/dgx-h100-32nodes.yaml

A part replaces the matching section of the instance file (cost/readers/instance.py,
`load_instance_parts`); without an instance file all three parts are needed. Bad input raises
`InstanceError`, which the CLI prints as one line and exits 2.
"""

from __future__ import annotations

import argparse
import sys

from paraplan.cost.errors import ConfigError, InstanceError
from paraplan.cost.specs import Instance

_PARTS = (("hf_config", "--hf-config"), ("cluster", "--cluster"), ("job", "--job"))


def add_instance_args(parser: argparse.ArgumentParser) -> None:
    """Add the optional positional INSTANCE and --hf-config/--cluster/--job/--seq-len."""
    parser.add_argument("instance", nargs="?", metavar="INSTANCE",
                        help="instance YAML; optional when --hf-config, --cluster and --job"
                             " are all given")
    parts = parser.add_argument_group(
        "instance parts", "each replaces the matching section of INSTANCE; without INSTANCE"
                          " all three are needed")
    parts.add_argument("--hf-config", metavar="PATH",
                       help="Hugging Face config.json (or its directory) for the model")
    parts.add_argument("--cluster", metavar="PATH",
                       help="cluster YAML: 'cluster:' and optionally 'gpu_types:'"
                            " (see instances/clusters/)")
    parts.add_argument("--job", metavar="PATH",
                       help="job YAML: 'job:' and optionally 'search:' (see instances/jobs/)")
    parts.add_argument("--search", metavar="KEY=V[,V...]", action="append", default=None,
                       help="replace one key of the search space, e.g. --search tp=1,2,4"
                            " --search zero=1 (keys and values as under `search:` in the YAML);"
                            " repeatable")
    add_objective_arg(parts)
    parts.add_argument("--seq-len", metavar="N",
                       help="training sequence length in tokens; replaces the model's (needed"
                            " with --hf-config: a config gives only the longest context)")


def add_objective_arg(parser) -> None:
    """--objective, which replaces search.objective (cost/objective.py)."""
    parser.add_argument("--objective", metavar="mean|pNN", default=None,
                        help="what the planner minimises: mean, the predicted iteration time, or"
                             " pNN, its NN-th percentile under the cost model's out-of-sample"
                             " error, so a plan far from published runs must win by more than"
                             " its wider band (default: search.objective, else p90; README)")


# the commands that plan or price a DualPipe job (job.pipeline_schedule: dualpipe) besides those
# that only price a plan (`simulate_only`): the planner solves its split problem
# (formulations/dualpipe.py), compare simulates each plan (cost/dualpipe.py); the others work on
# the 1F1B schedules' formulations
DUALPIPE_COMMANDS = ("plan", "exhaustive", "verify", "memory", "report", "compare")


def read_instance(args: argparse.Namespace, simulate_only: bool = False) -> Instance:
    """The instance the arguments added by add_instance_args describe, its file read once, in
    either form (cost/readers/instance.load_instance_parts), the --search overrides checked like its own
    `search:`. A DualPipe job (job.pipeline_schedule) is
    planned by `paraplan plan` and priced by `paraplan simulate` (cost/dualpipe.py): every
    other command refuses it here, in one line, unless `simulate_only`."""
    from paraplan.cost.readers.instance import load_instance_parts

    instance = getattr(args, "instance", None)
    absent = [flag for dest, flag in _PARTS if getattr(args, dest, None) is None]
    if instance is None and absent:
        given = len(_PARTS) - len(absent)
        problem = ("no instance given" if not given
                   else f"no INSTANCE, and {', '.join(absent)} missing")
        raise InstanceError("<arguments>", "INSTANCE" if not given else ", ".join(absent),
                            problem, "give an instance YAML, or all of --hf-config, --cluster"
                                     " and --job")
    overrides = search_overrides(getattr(args, "search", None), getattr(args, "objective", None))
    hf_config = getattr(args, "hf_config", None)
    seq_len = parse_seq_len(getattr(args, "seq_len", None))
    if hf_config is not None and seq_len is None:
        refuse_maximum_context(hf_config)
    inst = load_instance_parts(instance, hf_config=hf_config,
                               cluster=getattr(args, "cluster", None),
                               job=getattr(args, "job", None), seq_len=seq_len)
    if overrides:
        from paraplan.cost.readers.search import override_search
        inst = override_search(inst, overrides, SEARCH_SOURCE)
    from paraplan.cost.specs import PipelineSchedule
    if (inst.job.pipeline_schedule is not PipelineSchedule.ONE_F_ONE_B and not simulate_only
            and getattr(args, "command", None) not in DUALPIPE_COMMANDS):
        raise InstanceError(inst.source, "job.pipeline_schedule",
                            "dualpipe is planned by `paraplan plan`, `exhaustive`, `verify`,"
                            " `memory` and `report` and priced by `simulate` and `compare`;"
                            f" `paraplan {getattr(args, 'command', '...')}` works on the 1F1B and"
                            " interleaved schedules (cost/dualpipe.py)",
                            "use pipeline_schedule: 1f1b here, or plan / simulate the DualPipe job")
    return inst


SEARCH_SOURCE = "<--search>"


def search_overrides(items: list[str] | None, objective: str | None = None) -> dict:
    """--search KEY=V[,V...] options as a `search:` mapping of YAML values: list keys get a
    list (`tp=1,2,4` -> [1, 2, 4], `zero=1` -> [1]), the others one value (`max_pp=8`,
    `full_recompute=false`). Values are read as YAML scalars, so they are checked afterwards
    exactly like the file's (cost/readers/search.override_search). `objective`: --objective, as
    --search objective=..."""
    from paraplan.cost.readers.search import SEARCH_KEYS, SEARCH_LIST_KEYS

    out: dict = {}
    if objective is not None:
        items = [*(items or []), f"objective={objective}"]
    for item in items or []:
        key, eq, text = item.partition("=")
        key = key.strip()
        if not eq or not key or not text.strip():
            raise InstanceError(SEARCH_SOURCE, "--search", f"expected KEY=VALUE[,VALUE...], got {item!r}",
                                "write e.g. --search tp=1,2,4 or --search zero=1")
        if key in out:
            raise InstanceError(SEARCH_SOURCE, f"search.{key}", "given twice",
                                "give each key once, listing all its values: --search tp=1,2,4")
        tokens = [_scalar(t) for t in text.split(",")]
        if key in SEARCH_LIST_KEYS or key not in SEARCH_KEYS:  # unknown keys: the loader names them
            out[key] = tokens
        elif len(tokens) != 1:
            raise InstanceError(SEARCH_SOURCE, f"search.{key}", f"takes one value, got {text!r}",
                                f"write --search {key}=VALUE")
        else:
            out[key] = tokens[0]
    return out


def _scalar(text: str):
    import yaml
    try:
        value = yaml.safe_load(text.strip())
    except yaml.YAMLError:
        return text.strip()
    return value if isinstance(value, (bool, int, float, str)) else text.strip()


def refuse_maximum_context(hf_config) -> None:
    """A Hugging Face config without --seq-len: refused, naming the model's maximum context.

    config.json gives the longest context a model supports (max_position_embeddings: 131,072
    for Qwen2-7B), not the length it is trained at, and a job file's global_batch counts
    sequences: planning at the maximum would plan 512 x 131,072 tokens for a "4M tokens" job.
    Neither a job file nor the config holds the training length, so it is asked for. The
    config's own errors come first (a BLOOM config, without any maximum, asks for --seq-len
    itself)."""
    from paraplan.cost.hf_config import model_from_hf_config

    model = model_from_hf_config(hf_config)
    raise InstanceError(str(hf_config), "--seq-len", "not given, and config.json gives only the"
                        f" longest context {model.name} supports, {model.seq_len:,} tokens, not"
                        " the length it is trained at (job.global_batch counts sequences of it)",
                        "give the training sequence length, e.g. --seq-len 4096, or"
                        f" --seq-len {model.seq_len} to plan at the maximum")


def parse_seq_len(text: str | int | None) -> int | None:
    """--seq-len as an integer (positive_int_arg)."""
    return positive_int_arg(text, "--seq-len", "give the sequence length in tokens, e.g. --seq-len 8192")


def positive_int_arg(text: str | int | None, flag: str, fix: str) -> int | None:
    """The positive integer argument `flag` (None where not given); parsed here rather than by
    argparse so that a bad value is one `InstanceError` line like every other input error."""
    if text is None or isinstance(text, int):
        return text
    try:
        value = int(text)
    except ValueError:
        raise InstanceError("<arguments>", flag, f"expected an integer, got {text!r}", fix) from None
    if value < 1:
        raise InstanceError("<arguments>", flag, f"must be >= 1, got {value}", fix)
    return value


def read_calibration_files(files: list[str] | None, keep_going: bool = False):
    """The rows of `files` (both bundled published files when none are given) and a label for
    messages; a bad file raises one InstanceError naming it. With `keep_going`, a row that breaks
    the schema is set aside instead, and a third value lists those as {"id", "reason"}: one bad
    row never refuses the whole file (a file none of whose rows can be read still raises)."""
    from paraplan.cost.calibration import BUNDLED_FILES, load_published, load_rows

    paths = files or [str(p) for p in BUNDLED_FILES]
    if not files:  # the bundled files: checked, every row good, and read once per process
        rows = load_published()  # (issue 32: parsing them was a third of each `accuracy`)
        return (rows, ", ".join(paths), []) if keep_going else (rows, ", ".join(paths))
    rows: list[dict] = []
    rejected: list[dict] = []
    for path in paths:
        try:
            good, bad = load_rows(path, keep_going=True)
        except InstanceError:
            raise  # names the file and the row's field already: never wrapped a second time
        except (OSError, ConfigError) as e:
            raise InstanceError(path, "<file>", str(e), "pass a file in the calibration schema")
        except Exception as e:  # malformed YAML and the like: still one line, exit 2
            raise InstanceError(path, "<file>", f"cannot read: {e}".splitlines()[0],
                                "pass a file in the calibration schema")
        if bad and (not keep_going or not good):  # a file with no usable row is refused whole
            raise bad[0][1]
        rows.extend(good)
        rejected.extend({"id": row_id, "field": err.field, "reason": f"{err.problem} (fix: {err.fix})",
                         "file": path} for row_id, err in bad)
    label = ", ".join(paths)
    return (rows, label, rejected) if keep_going else (rows, label)


def progress_enabled(args) -> bool:
    """Whether a command shows its progress: on a terminal, or with --progress; never with
    --quiet."""
    if getattr(args, "quiet", False):
        return False
    return getattr(args, "progress", False) or sys.stderr.isatty()
