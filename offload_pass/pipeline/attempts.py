"""The partitions mode="budget"'s recompute search tries: made, logged, or pruned.

Takes: a ``Run`` (the attempt passes under a ``PlanRequest``), the budget
and, for block cuts, their step bound (``planning.cut_bound``). Gives
``Tried``, what the search made so far, whose ``guard`` wraps a ``Run`` so
that a partition that cannot be kept is not planned (its own step without
offload stands above the fastest found within the budget: the ``prune``
pass stops it) or, for a block cut whose bound already stands above, not
made at all; ``trial_of`` (an attempt as a ``Trial``) and
``partition_logged`` (one partition with a line of progress).

Why: every partition of an 8B-sized joint graph costs seconds to tens of
seconds and every plan on it more; the search keeps the fastest within the
budget, so one that cannot beat a partition found within it changes
nothing but the time the search takes. Nothing is pruned until a partition
reaches the budget, so the lowest peak of a budget out of reach is found
as before. ``disabled_passes=("prune",)`` plans every partition.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Callable, Optional, Union

from offload_pass.pipeline.passes import PassState, PlanRequest
from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.trial import Pruned, Trial

__all__ = ["Outcome", "Run", "Tried", "named", "partition_logged", "trial_of"]

log = logging.getLogger("offload_pass")

# An attempt: planned, pruned, or None (its saved set was planned already).
Outcome = Union[PassState, Pruned, None]
Run = Callable[[PlanRequest, set], Outcome]


def trial_of(attempt: PassState) -> Trial:
    """An attempt's partition as the step simulator predicts it."""
    prediction = attempt.plan.prediction
    return Trial(
        attempt.plan.recompute_level, prediction.step_ms, prediction.peak, prediction.peak_offset,
        attempt.plan.offloaded_bytes,
    )


def named(level, described: Optional[str] = None) -> str:
    """A partition in a log line: a block cut as it reads, a level as PyTorch's setting (``described``: its trial's figures)."""
    text = described or format(level, "g")
    return text if isinstance(level, BlockCut) else f"activation_memory_budget={text}"


@dataclasses.dataclass
class Tried:
    """What the search made so far: ``attempts`` planned (the first one
    included), ``pruned``; ``bound`` gives a block cut's step bound (None:
    none known); ``prune`` False: nothing pruned."""

    budget: int
    attempts: list
    bound: Optional[Callable[[BlockCut], Optional[float]]] = None
    prune: bool = True
    pruned: list = dataclasses.field(default_factory=list)

    def beat_ms(self) -> Optional[float]:
        """The fastest predicted step within the budget so far (None: none reaches it)."""
        steps = [
            a.plan.prediction.step_ms for a in self.attempts
            if a.plan.prediction is not None and a.plan.prediction.peak <= self.budget
        ]
        return min(steps, default=None) if self.prune else None

    def most_blocks(self, of: int, keep_attention: bool) -> int:
        """The most of ``of`` blocks a cut may recompute with its bound not
        above the step to beat (``of`` where nothing is pruned; 0: none).
        A cut of more blocks recomputes all a cut of fewer does, so the
        bound grows with the count: bisected."""
        beat = self.beat_ms()
        if beat is None or self.bound is None:
            return of
        low, high = 0, of
        while low < high:
            count = (low + high + 1) // 2
            bound = self.bound(BlockCut(count, of, keep_attention))
            if bound is None or bound <= beat:
                low = count
            else:
                high = count - 1
        return low

    def guard(self, run: Callable[[PlanRequest, set], Optional[PassState]]) -> Run:
        """``run`` with the pruning of the module docstring; every attempt it plans joins ``attempts``."""

        def guarded(request: PlanRequest, seen: set) -> Outcome:
            beat, level = self.beat_ms(), request.level
            if beat is not None and isinstance(level, BlockCut) and self.bound is not None:
                bound = self.bound(level)
                if bound is not None and bound > beat:
                    self.pruned.append(Pruned(level, bound, beat, made=False))
                    return self.pruned[-1]
            attempt = run(dataclasses.replace(request, beat_ms=beat), seen)
            if attempt is not None and getattr(attempt, "slower_than", None) is not None:
                self.pruned.append(Pruned(level, attempt.baseline.step_ms, beat, made=True))
                return self.pruned[-1]
            if attempt is not None:
                self.attempts.append(attempt)
            return attempt

        return guarded


def partition_logged(first: PassState, run: Run, level, seen: set) -> Outcome:
    """One partition of mode="budget"'s search, with a line of progress
    (each costs seconds to tens of seconds on a large model)."""
    start = time.perf_counter()
    attempt = run(PlanRequest(level=level), seen)
    elapsed = time.perf_counter() - start
    graph = first.plan.graph_id
    if attempt is None:
        log.info(
            "offload_pass: %s mode=budget: %s saves what a partition tried before saved (partitioned in %.1f s)",
            graph, named(level), elapsed,
        )
    elif isinstance(attempt, Pruned):
        log.info(
            "offload_pass: %s mode=budget: %s not %s: %s (%.1f s)", graph, named(level),
            "planned" if attempt.made else "partitioned", attempt.describe(), elapsed,
        )
    else:
        log.info(
            "offload_pass: %s mode=budget: %s (partitioned and planned in %.1f s)",
            graph, named(level, trial_of(attempt).describe()), elapsed,
        )
    return attempt
