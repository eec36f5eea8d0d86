"""The argparse parser of `paraplan` and of every sub-command (argparse gives sub-commands the
class of their parent): each option's default shown in `--help`, the exit statuses in the
epilog, and a close match suggested for a mistyped sub-command or choice."""

from __future__ import annotations

import argparse
import re

# an option's help text, shared by the commands that take the option
HELP_TIME_LIMIT_S = ("wall-clock seconds for the whole command: pricing, bounds and every solve"
                     " share it; a command it stops says so and claims no proof it did not finish")
HELP_THREADS = "CP-SAT search workers (the dp backend and the MILP's CBC use one)"
HELP_JSON = ("print one JSON object on standard output instead of text (the schema:"
             " python -m paraplan.solver.commands.schema)")
HELP_BACKEND = ("inner solver of each configuration's split: dp (exact dynamic programme; other"
                " problems go to CP-SAT), cpsat (OR-Tools CP-SAT) or milp (CBC)")
HELP_BACKEND_MIXED = "inner solver: cpsat (OR-Tools CP-SAT) or milp (CBC)"
HELP_MAX_CANDIDATES = ("refuse, with an estimate of the count, a declared space of more candidate"
                       " plans than this")

# the sub-commands in the order `paraplan --help` lists them: the order a user meets them (plan a
# job, look at the plan, hand it to a framework), then the solver's own checks, mixed clusters,
# the per-operator and batch tools, and last the cost model's evidence. Each module registers its
# own commands, so the order is set here once, after they all have.
COMMAND_ORDER = ("plan", "simulate", "memory", "compare", "report", "export", "model",
                 "exhaustive", "verify", "replan", "timeline", "partition", "sweep",
                 "accuracy", "calibrate", "bench")


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """Appends `(default: X)` to an option's help when X says something (not None or False),
    and keeps the epilog's lines (the exit-status table) as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        # identity, not ==: a default of 0 is worth showing, False (a flag left off) is not
        if ("%(default)" in text or default is None or default is False
                or default == argparse.SUPPRESS or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """argparse's usage line and message, with the closest valid choice when a choice was
        mistyped (`paraplan pln` -> did you mean 'plan'?)."""
        super().error(message + did_you_mean(message))


def did_you_mean(message: str) -> str:
    """' (did you mean 'X'?)' for argparse's "invalid choice: 'Y' (choose from ...)" message
    when a choice X is close to Y, else ''."""
    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if m is None:
        return ""
    import difflib  # here: only a mistyped choice reads it (issue 33, start-up)
    choices = [c.strip().strip("'\"") for c in m.group(2).split(",")]
    close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def order_subcommands(sub: argparse._SubParsersAction) -> None:
    """Put the registered sub-commands in COMMAND_ORDER, both in the usage line (argparse builds
    it from `choices`) and in the help list (from `_choices_actions`)."""
    registered = set(sub.choices)
    assert registered == set(COMMAND_ORDER), (
        f"COMMAND_ORDER and the registered sub-commands differ: {registered ^ set(COMMAND_ORDER)}")
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
    parsers = dict(sub.choices)
    sub.choices.clear()
    sub.choices.update((name, parsers[name]) for name in COMMAND_ORDER)
    sub._choices_actions.sort(key=lambda action: rank[action.dest])
