"""User-facing errors. `assert` is reserved for invariants (bugs); these are for bad input."""


class InstanceError(ValueError):
    """A planning instance, plan or catalogue file is malformed.

    The message always names the file, the field and the fix, in one line.
    """

    def __init__(self, path: str, field: str, problem: str, fix: str):
        self.path, self.field, self.problem, self.fix = path, field, problem, fix
        super().__init__(f"{path}: {field}: {problem} (fix: {fix})")


class ConfigError(ValueError):
    """A parallel configuration is inconsistent with the instance (e.g. tp*pp*dp*cp != GPUs)."""
