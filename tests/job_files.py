"""Instance files for loader tests: the bundled tiny-gpt instance with some job keys changed."""

from __future__ import annotations

from pathlib import Path

import yaml

TINY = Path(__file__).resolve().parents[1] / "instances" / "tiny-gpt-8xA100.yaml"


def tiny_with_job(tmp_path, **job_extra) -> Path:
    """tiny-gpt-8xA100.yaml written under `tmp_path` with `job_extra` merged into its job."""
    data = yaml.safe_load(TINY.read_text())
    data["job"].update(job_extra)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
