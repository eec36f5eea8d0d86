"""The exit statuses of `paraplan`, in one table: the commands return these, and `paraplan --help`
prints EPILOG (docs/commands.md lists the same)."""

from __future__ import annotations

import textwrap

EXIT_INFEASIBLE = 4  # proved: no plan in the declared space fits (not an error of the input)
EXIT_ROWS_REFUSED = 1  # accuracy: some rows of the files were refused as read, the rest priced

# (status, meaning), in the order --help lists them
EXIT_STATUSES = (
    (0, "done: a plan (proved optimal or feasible), a report or an export written; verify: every"
        " method proved the same optimum"),
    (1, "simulate, memory: the plan does not fit memory; verify: the methods disagree or not all"
        " proved an answer; partition: the DP and the MILP disagree; accuracy: some rows were"
        " refused as read (each named with its field and reason; the rest priced)"),
    (2, "bad input (one line naming the file, the field and the fix), or an export refused"),
    (3, "a solver is missing or crashed, or a time limit stopped the search before any answer"),
    (EXIT_INFEASIBLE, "proved infeasible: no plan in the declared space fits (plan, plan --top,"
                      " exhaustive, verify when every method proved it, report, memory)"),
    (130, "interrupted (Ctrl-C)"),
)



def status_code(status: str) -> int:
    """A planning command's exit status for its result's status: a plan 0, proved infeasible
    EXIT_INFEASIBLE, stopped by the time limit without a plan 3."""
    if status == "infeasible":
        return EXIT_INFEASIBLE
    return 0 if status in ("optimal", "feasible") else 3


EPILOG = "exit status:\n" + "\n".join(
    textwrap.fill(meaning, width=88, initial_indent=f"  {code:<4} ", subsequent_indent=" " * 7)
    for code, meaning in EXIT_STATUSES)
