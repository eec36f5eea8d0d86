"""Bundled data files read once per installation, not once per process.

The strict YAML loader (cost/readers/strict_yaml.read_yaml) composes its nodes in Python: the published rows
(cost/published/published*.yaml, 187 KB) took 0.14-0.2 s of CPU and the stored
cross-validation 0.04 s on every `paraplan plan`, which reads them for the trust band and the
quantile objective (issue 33: a third of the command's start-up). `cached` keeps what a
reader made of a file as JSON in the user's cache directory ($XDG_CACHE_HOME or ~/.cache,
under paraplan/), named by a digest of the file's bytes and of the source of the modules
that read and check it, so a later process reads the same data in about 2 ms. The digest
names exactly what the data was read from and by: a cached copy is never stale, and one
written by another version of the readers is never found. A copy that cannot be read or
written (a read-only home, a truncated file) is read from the file again, and data that JSON
does not give back equal (a date, a tuple, a non-string key) is not cached.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def cache_dir() -> Path | None:
    """$XDG_CACHE_HOME/paraplan or ~/.cache/paraplan; None without a home to put it in (where
    `~` does not expand, it would name a folder in the working directory)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "paraplan" if os.path.isabs(base) else None


def cached(path: Path, read: Callable[[Path], Any], readers: tuple[ModuleType, ...]) -> Any:
    """read(path), or the copy of it cached under a digest of `path` and the `readers`'
    source files (the modules whose code decides what `read` returns)."""
    digest = hashlib.sha256()
    for part in (path, *(Path(m.__file__) for m in readers)):
        digest.update(part.read_bytes())
    folder = cache_dir()
    if folder is None:
        return read(path)
    copy = folder / f"{path.stem}-{digest.hexdigest()[:32]}.json"
    try:
        return json.loads(copy.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    data = read(path)
    try:
        text = json.dumps(data)
        if json.loads(text) == data:
            copy.parent.mkdir(parents=True, exist_ok=True)
            tmp = copy.with_name(f"{copy.name}.{os.getpid()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, copy)  # whole or not at all; parallel processes write the same bytes
    except (OSError, TypeError, ValueError):
        pass
    return data


def bundled_yaml(path: Path) -> Any:
    """strict_yaml.read_yaml(path) of a data file shipped with the package (cost/published/ran.yaml,
    moe.yaml, moe_crossval.yaml), parsed once per installation: `cached` under a digest of the
    file and of cost/readers/strict_yaml.py, the reader. moe.yaml alone took 0.04-0.06 s of CPU in each
    `paraplan plan` of an MoE model (issue 33)."""
    from paraplan.cost.readers import strict_yaml
    return cached(path, strict_yaml.read_yaml, (strict_yaml,))
