"""--seq-len and sweep's --workers read by one parser (solver/commands/inputs.positive_int_arg):
a value that is not a positive integer is one `InstanceError` line naming the flag, before
anything is read or run."""

import argparse

import pytest

from paraplan.cost.errors import InstanceError
from paraplan.solver.commands import sweep as sweep_command
from paraplan.solver.commands.inputs import parse_seq_len, positive_int_arg


def _sweep(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="paraplan")
    sweep_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["sweep", "no-such-sweep.yaml", *argv])
    return args.func(args)


@pytest.mark.parametrize("text, words", [("four", "expected an integer, got 'four'"),
                                         ("0", "must be >= 1, got 0"), ("-3", "must be >= 1, got -3")])
def test_workers_refused_in_one_line_before_the_sweep_is_read(text, words):
    with pytest.raises(InstanceError) as info:
        _sweep("--workers", text)  # the sweep file does not exist: the flag is read first
    err = info.value
    assert (err.path, err.field) == ("<arguments>", "--workers")
    assert words in str(err) and "--workers 4" in str(err) and "\n" not in str(err)


def test_positive_values_and_absent_ones_pass():
    assert positive_int_arg("8", "--workers", "fix") == 8 and positive_int_arg(None, "--workers", "fix") is None
    assert parse_seq_len("8192") == 8192 and parse_seq_len(4096) == 4096 and parse_seq_len(None) is None
    with pytest.raises(InstanceError, match="--seq-len 8192"):
        parse_seq_len("8k")
