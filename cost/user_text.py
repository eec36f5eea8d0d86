"""Reading a user's file as text, refusing one too large before it is read: shared by every
user-file reader (cost/readers/, cost/hf_config.py). Apart from the Hugging Face config reader,
so that a plan of an instance YAML does not load that reader (issue 33, start-up)."""

from __future__ import annotations

import os
from pathlib import Path

from paraplan.cost.errors import InstanceError


def read_text_file(path: str | Path, max_bytes: int) -> str:
    """The UTF-8 text of `path`, refusing files over `max_bytes` before reading them.

    Shared by every user-file reader (cost/readers/, cost/calibration.py). The size is checked
    twice: from the file system before reading, and by reading at most one byte more than the
    limit, which also bounds files whose size the system does not know (/dev/zero, pipes).
    """
    name = str(path)
    limit = f"{max_bytes / 2**20:g} MiB"
    too_large = (f"file is larger than the {limit} limit for this kind of file",
                 "check the path; real ones are far smaller")
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > max_bytes:
                raise InstanceError(name, "<file>", *too_large)
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise InstanceError(name, "<file>", "file not found", "check the path") from None
    except IsADirectoryError:
        raise InstanceError(name, "<file>", "is a directory",
                            "give the path of a file, not of a directory") from None
    except OSError as e:
        raise InstanceError(name, "<file>", f"cannot be read ({e.strerror or e})",
                            "check its permissions") from None
    if len(data) > max_bytes:
        raise InstanceError(name, "<file>", *too_large)
    try:
        return data.decode("utf-8-sig")  # a leading byte-order mark is dropped
    except UnicodeDecodeError as e:
        raise InstanceError(name, "<file>",
                            f"is not UTF-8 text (byte {e.start} is {data[e.start]:#04x})",
                            "save it as UTF-8 text; a binary or UTF-16 file cannot be read"
                            ) from None
