"""mode="auto"'s selection: the most peak reduction within ``max_overhead``.

Takes: a ``StepWithoutOffload``, the ``Candidate`` copies and the slowdown
allowed. Gives ``choose_auto``: the chosen copies in the order chosen, with
the search model's ``Estimate`` of their step. Greedy searches;
``tests/test_selection.py`` checks them against brute force on small cases.
"""

from __future__ import annotations

import functools
from typing import Optional, Sequence

from offload_pass.planning.selection_model import simulate_offload
from offload_pass.planning.selection_step import Candidate, Estimate, StepWithoutOffload

__all__ = ["choose_auto"]


def choose_auto(
    step: StepWithoutOffload, candidates: Sequence[Candidate], max_overhead: float
) -> tuple[list[Candidate], Estimate]:
    """The most peak reduction with the step at most ``1 + max_overhead``
    times the step without offload: the better (lower peak, then shorter
    step) of two searches. A greedy (``_greedy_auto``) and the copies made
    earliest (``_earliest_first``): the first k in the order they are
    produced, for the k that lowers the peak most within the limit."""
    greedy = _greedy_auto(step, candidates, max_overhead)
    earliest = _earliest_first(step, candidates, max_overhead)
    return min((greedy, earliest), key=lambda r: (r[1].peak, r[1].step_ms))


def _greedy_auto(
    step: StepWithoutOffload, candidates: Sequence[Candidate], max_overhead: float
) -> tuple[list[Candidate], Estimate]:
    """Add the candidate that lowers the peak most while the step stays
    within the limit (ties: the cheaper in time); stop when none lowers it."""
    run = functools.partial(simulate_offload, step)
    base = run([])
    limit = base.step_ms * (1 + max_overhead)
    chosen: list[Candidate] = []
    current = base
    remaining = list(candidates)
    while remaining:
        best: Optional[tuple[tuple[int, float], Candidate, Estimate]] = None
        for c in remaining:
            p = run(chosen + [c])
            if p.step_ms > limit + 1e-9 or p.peak >= current.peak:
                continue
            score = (current.peak - p.peak, -p.step_ms)
            if best is None or score > best[0]:
                best = (score, c, p)
        if best is None:
            break
        chosen.append(best[1])
        remaining.remove(best[1])
        current = best[2]
    return chosen, current


def _earliest_first(
    step: StepWithoutOffload, candidates: Sequence[Candidate], max_overhead: float
) -> tuple[list[Candidate], Estimate]:
    """The first k candidates in production order, for the k with the
    lowest peak within the limit (ties: the shorter step). What a person
    marks by hand, whole layers from the first: the earliest copies have
    the most forward left to hide behind and the most backward before
    their reload. A greedy that takes the largest peak gain first can
    spend the time on a few costly copies and stop short of such a set."""
    order = sorted(candidates, key=lambda c: (c.produced, c.key))
    base = simulate_offload(step, [])
    limit = base.step_ms * (1 + max_overhead)
    best: tuple[list[Candidate], Estimate] = ([], base)
    for k in range(1, len(order) + 1):
        p = simulate_offload(step, order[:k])
        if p.step_ms <= limit + 1e-9 and (p.peak, p.step_ms) < (best[1].peak, best[1].step_ms):
            best = (order[:k], p)
    return best
