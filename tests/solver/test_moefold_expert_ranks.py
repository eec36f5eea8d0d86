"""cost/space_rules.expert_ranks_modulus: expert_layouts reads a stage's rank count only through
gcd(tp x ranks, K) (solver/space._Listing keys its expert layouts by that gcd: with
search.idle_gpus DeepSeek-V3 on 2,048 H800 read 3,840 rank counts, 36 gcds). Checked by brute
force: over every rank count up to 360 of many (experts, expert width, tp, listed ep and etp),
those of one gcd get one answer; a modulus without the etp values' factor (the experts alone)
splits some gcd's answers, so the check can fail."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

from paraplan.cost.space_rules import expert_layouts, expert_ranks_modulus

RANKS = range(1, 361)


def _cases():
    """(model, space, tp) of MoE models and listed ep / etp, and one dense model."""
    for experts, ffn, tp, ep, etp in itertools.product((6, 160, 256), (1408, 96),
                                                       (1, 2, 8), (None, (1, 4, 32), (2, 3, 5, 16)),
                                                       (None, (1, 2), (1, 4, 8), (3, 16))):
        model = SimpleNamespace(moe=SimpleNamespace(experts=experts, expert_ffn=ffn))
        yield model, SimpleNamespace(ep=ep, etp=etp), tp
    yield SimpleNamespace(moe=None), SimpleNamespace(ep=None, etp=None), 4


def _split_gcds(modulus_of) -> int:
    """(case, gcd) pairs whose rank counts get more than one answer under `modulus_of`."""
    bad = 0
    for model, space, tp in _cases():
        K = modulus_of(model, space, tp)
        seen: dict[int, set] = {}
        for ranks in RANKS:
            answer = tuple(tuple(expert_layouts(model, space, tp, ranks, sp)) for sp in (False, True))
            seen.setdefault(math.gcd(tp * ranks, K), set()).add(answer)
        bad += sum(len(answers) > 1 for answers in seen.values())
    return bad


def test_one_answer_per_gcd():
    assert _split_gcds(expert_ranks_modulus) == 0


def test_a_modulus_without_the_etp_values_is_caught():
    assert _split_gcds(lambda model, space, tp: model.moe.experts if model.moe else 1) > 0
