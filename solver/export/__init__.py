"""A plan as the launch settings of Megatron-LM, torchtitan or DeepSpeed: one module per
framework (megatron.py, torchtitan.py, deepspeed.py), the shared steps in common.py.

Each `to_<framework>(inst, plan)` returns `ExportResult(text, emitted)`: `text` is the
configuration in the framework's own syntax; `emitted` the configuration it describes, as an
(instance, plan) pair cost/ can price, with one line per deviation from the plan (none: exact)
and notes."""

from paraplan.solver.export.common import (MAX_SLOWDOWN, Comparison, Emitted, ExportRefused,
                                          ExportResult, Prediction, compare, will_not_run)
from paraplan.solver.export.deepspeed import DEEPSPEED_VERSION, to_deepspeed
from paraplan.solver.export.megatron import MEGATRON_VERSION, to_megatron
from paraplan.solver.export.torchtitan import TORCHTITAN_VERSION, to_torchtitan

# Format name -> (exporter, comment prefix for the deviation lines, or None where the syntax
# has no comments: JSON; the framework version it targets)
FORMATS = {
    "megatron": (to_megatron, "#", MEGATRON_VERSION),
    "torchtitan": (to_torchtitan, "#", TORCHTITAN_VERSION),
    "deepspeed": (to_deepspeed, None, DEEPSPEED_VERSION),
}

__all__ = ["FORMATS", "MAX_SLOWDOWN", "Comparison", "Emitted", "ExportRefused", "ExportResult",
           "Prediction", "compare", "to_deepspeed", "to_megatron", "to_torchtitan", "will_not_run"]
