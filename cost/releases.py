"""The releases of each training framework that cost/ knows: an instance's `job.framework_version`
and a published row's `framework_version` (cost/published/ran.yaml) name one of them.

A framework's release decides what its run could use (cost/framework_rules.release_space, by the
release's year: interleaving, sequence parallelism, the distributed optimizer, Megatron-FSDP,
fused attention) and how far the cost model's fit is from it (cost/trust.py counts a release that
fewer than three published rows validate as unvalidated, which widens the plan's band). The
efficiencies themselves are not fitted per release: every release here with published rows has
them from one source family only (NeMo 24.07: the NeMo performance summary; v1.0: the v1 blog),
so a per-release value would be that family's fudge, and leave-one-family-out cross-validation
could not validate it (docs/accuracy.md, "The framework release").

Each framework's last entry is its current release, the default of an instance that names none.
Versions are written as each project tags them; each entry says what it changed that cost/
prices, and where that was read (the tags and files of the public repositories).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Framework(str, Enum):
    """The training framework that runs the plan: it decides what can run (solver/space.py)
    and how ZeRO/FSDP, overlap and context parallelism behave (cost/framework.py)."""

    MEGATRON = "megatron"  # Megatron-LM / Megatron-core / NeMo
    TORCHTITAN = "torchtitan"  # PyTorch FSDP2 + DTensor TP, PP, CP
    DEEPSPEED = "deepspeed"  # DeepSpeed ZeRO (with Megatron-DeepSpeed for tp/pp)
    COMPOSER = "composer"  # MosaicML Composer / llm-foundry: PyTorch FSDP1 data parallel only


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """A framework release: its tag, date and what it changed that cost/ prices."""
    framework: Framework
    version: str  # as the project tags it
    year: int  # the release's date: what it could run (framework_rules.release_space)
    month: int
    changed: str  # what this release changed that cost/ prices, and the source

    @property
    def date(self) -> str:
        return f"{self.year}-{self.month:02d}"


def _r(framework: Framework, version: str, date: str, changed: str) -> Release:
    year, month = (int(x) for x in date.split("-"))
    return Release(framework=framework, version=version, year=year, month=month, changed=changed)


_M, _D, _T, _C = Framework.MEGATRON, Framework.DEEPSPEED, Framework.TORCHTITAN, Framework.COMPOSER

# Oldest first per framework; the last is the current release. Dates are the tags' dates in the
# project's repository (NVIDIA/Megatron-LM, deepspeedai/DeepSpeed, pytorch/torchtitan,
# mosaicml/composer), except NeMo's container, dated by its name.
RELEASES: tuple[Release, ...] = (
    # Megatron-LM / Megatron-core / NeMo (which runs Megatron-core): one framework to cost/
    _r(_M, "v1.0", "2020-04", "tensor parallelism and activation checkpointing"
       " (--checkpoint-activations); no pipeline parallelism in megatron/arguments.py at v1.0"),
    _r(_M, "v2.0", "2021-01", "pipeline parallelism with the interleaved 1F1B schedule"
       " (--num-layers-per-virtual-pipeline-stage, megatron/arguments.py at v2.0; Narayanan et al."
       " SC'21)"),
    _r(_M, "v2.6", "2021-08", "the last tag before sequence parallelism, selective recomputation"
       " and the distributed optimizer (none in megatron/arguments.py at v2.6)"),
    _r(_M, "23.04", "2023-05", "sequence parallelism and selective recomputation (Korthikanti et al.,"
       " arXiv 2205.05198), the distributed optimizer (--use-distributed-optimizer) and FlashAttention"
       " (--use-flash-attn): all in megatron/arguments.py at 23.04"),
    _r(_M, "nemo-24.07", "2024-07", "the NeMo 24.07 container (Megatron-core with Transformer Engine:"
       " FP8 delayed scaling, tensor-parallel communication overlap; NVIDIA/NeMo"
       " docs/source/performance/performance_summary.md)"),
    _r(_M, "core_v0.12.0", "2025-05", "Megatron-FSDP (--use-custom-fsdp: ZeRO-2/3 with pp = 1;"
       " megatron/training/arguments.py at core_v0.12.0, absent at core_v0.11.0)"),
    _r(_M, "core_v0.19.0", "2026-08", "the latest Megatron-core tag read (NVIDIA/Megatron-LM"
       " core_v0.19.0); nothing cost/ prices changed since core_v0.12.0 as far as the model reads"),
    # DeepSpeed
    _r(_D, "v0.3.12", "2021-03", "ZeRO stage 3 (deepspeed/runtime/zero/stage3.py, first in v0.3.12)"),
    _r(_D, "v0.19.5", "2026-08", "the latest DeepSpeed tag read; ZeRO 1-3 as priced"
       " (cost/framework.py)"),
    # torchtitan
    _r(_T, "v0.1.0", "2025-06", "the first torchtitan tag: FSDP2, TP, PP, CP and float8 linears"
       " (README.md at v0.1.0)"),
    _r(_T, "v0.2.2", "2026-02", "the latest torchtitan tag read"),
    # MosaicML Composer (llm-foundry trains through it)
    _r(_C, "v0.32.1", "2025-07", "the latest Composer tag read (mosaicml/composer)"),
)


def releases(framework: Framework) -> tuple[Release, ...]:
    """The known releases of `framework`, oldest first."""
    return tuple(r for r in RELEASES if r.framework is framework)


def current_release(framework: Framework) -> Release:
    """The framework's current release: the default of an instance that names none."""
    return releases(framework)[-1]


def known_versions(framework: Framework) -> tuple[str, ...]:
    return tuple(r.version for r in releases(framework))


def find_release(framework: Framework, version: str | None) -> Release | None:
    """The release `version` names (the current one when None); None for a version the table
    does not hold (the loaders turn that into an error naming the known versions)."""
    if version is None:
        return current_release(framework)
    return next((r for r in releases(framework) if r.version == version), None)


def describe(framework: Framework, version: str | None) -> str:
    """Which release a plan's time is for, in words: 'megatron core_v0.19.0 (2026-08, the current
    release)'; `version` None is the current release, as the job's default."""
    release = find_release(framework, version) or current_release(framework)
    current = release == current_release(framework)
    how = ("the current release" + (", job.framework_version's default" if version is None else "")
           if current else "job.framework_version")
    return f"{framework.value} {release.version} ({release.date}, {how})"
