"""Stage 3f, offload plus recompute (mode="budget"): which partition to plan on.

Takes: one ``Trial`` per partition of the joint graph the backend planned
offload on (PyTorch's min-cut partitioner, once as it is and then under its
own ``activation_memory_budget`` at each of ``RECOMPUTE_LEVELS``), each with
the step simulator's prediction of its rewritten step; the saved tensors of
the first partition and the names the chosen one saves. Gives: the trial to
keep, the plan entries of the tensors it recomputes instead of saving, and,
for a re-plan under a calibration, the levels an earlier plan's trials show
out of reach (``levels_out_of_reach``: each level costs a partition, which
takes minutes on a large model) and of those, the ones to partition after
all where nothing the re-plan tried reaches the budget (``levels_to_retry``).

Why this way: the partitioner already knows how to recompute (its knapsack
over recomputable ops, the activation-checkpointing policies it honours);
what it lacks is offload. Planning offload on each of its partitions and
predicting the step of each lets one number, the predicted step under the
budget, choose between keeping, offloading and recomputing each saved
tensor. Pure functions over plain data: no graph, no device.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

from offload_pass.enums import Decision, SavedKind
from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.offload_plan import PlanEntry
from offload_pass.planning.reasons import Reason, detail
from offload_pass.planning.saved_set import SavedTensor
from offload_pass.planning.trial import Trial

__all__ = [
    "RECOMPUTE_LEVELS", "REACH_MARGIN", "SAME_SET_MARGIN", "Trial", "choose_trial", "levels_out_of_reach",
    "levels_to_retry", "newly_saved", "recompute_entries", "saved_again_above", "search_goes_on",
]

# PyTorch's activation_memory_budget, from light to full recompute. The
# partitioner's own peaks are not monotone in it, so every level is tried
# and judged by the prediction.
RECOMPUTE_LEVELS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
# How far over the budget (a share of it) an earlier trial's peak, moved by
# the new calibration's peak offset, must stand for a re-plan to skip its
# level: offload on a partition is planned under new node times and copy
# bandwidths, which move the lowest peak it reaches a little (copies queue
# differently), by far less than this.
REACH_MARGIN = 0.03
# How far above a saved set's size ratio (``saved_again_above``) a level must
# stand to be skipped as saving that set again. The ratio is the final saved
# set's; a knapsack level chose its set by its own estimate of the bytes,
# which PyTorch notes is usually a little above what is then saved.
SAME_SET_MARGIN = 0.02
# A calibration's peak offset for the partition of a recompute level
# (``Calibration.offset_for``; None: the first partition).
OffsetFor = Callable[[Optional[float]], int]


def choose_trial(trials: Sequence[Trial], budget: int) -> Trial:
    """The trial with the least predicted step among those whose predicted
    peak is within ``budget`` (ties: the lower peak, then less recompute);
    when none is, the one with the lowest peak (the report says by how much
    it misses)."""
    if not trials:
        raise ValueError("choose_trial needs at least one trial")
    order = {id(t): i for i, t in enumerate(trials)}
    reaching = [t for t in trials if t.peak <= budget]
    if reaching:
        return min(reaching, key=lambda t: (t.step_ms, t.peak, order[id(t)]))
    return min(trials, key=lambda t: (t.peak, t.step_ms, order[id(t)]))


def search_goes_on(tried: Sequence[Trial], budget: int) -> bool:
    """Whether the search over ``RECOMPUTE_LEVELS`` partitions the next
    level after ``tried`` (the levels partitioned so far, light to deep;
    offload alone not among them). Until a level reaches the budget, yes;
    after, while the level tried last reached it with a faster predicted
    step than every reaching level before it, or did worse (slower, or
    missed the budget) copying more bytes than the fastest reaching level.

    A deeper level recomputes more but needs fewer copies to reach the
    budget, so the reaching levels' steps fall while the copies dominate
    and rise once the recompute does: stopping at the first reaching level
    can keep a copy-bound plan. Nor does a deeper level always save less
    (PyTorch's partitioner can save more at 0.5 than at 0.9), so a level
    that did worse for its copies says nothing about the recompute of the
    levels below it: the search goes on past it. Trials whose copied bytes
    are not known stop it."""
    reaching = [t for t in tried if t.peak <= budget]
    if not reaching:
        return True
    last = tried[-1]
    if last in reaching and all(last.step_ms < t.step_ms for t in reaching if t is not last):
        return True
    fastest = min((t for t in reaching if t is not last), key=lambda t: t.step_ms, default=None)
    return (
        fastest is not None and last.copied_bytes is not None and fastest.copied_bytes is not None
        and last.copied_bytes > fastest.copied_bytes
    )


def saved_again_above(saved_bytes: int, first_bytes: int, inputs_bytes: int) -> Optional[float]:
    """The activation_memory_budget above which PyTorch's partitioner saves
    again the set a level at or above it saved (level 0 aside: there it
    saves the forward inputs alone, whatever the ratios): ``saved_bytes``,
    against the first partition's (``first_bytes``, no recompute budget)
    and the joint graph's forward inputs' (``inputs_bytes``). None where
    that is unknown (no bytes above the inputs'; symbolic sizes: the caller
    passes None bytes then).

    Why: ``choose_saved_values_set`` normalises a set's size as
    (bytes - inputs) / (first - inputs) and returns its more aggressive
    min-cut set for every budget above that set's ratio, its fully
    aggressive one likewise below that, and under both a knapsack over the
    banned nodes, whose optimum at one budget is the optimum at every
    smaller budget it still fits by the knapsack's own size estimate,
    which ``SAME_SET_MARGIN`` allows for. So the set saved at level b is
    saved again at every level in (ratio + margin, b] but 0; each such
    level costs a partition (seconds to tens of seconds on a large model)
    only to be found a duplicate; ``tests/test_recompute.py`` checks the
    rule on two models, every level from 0.99 to 0."""
    if first_bytes <= inputs_bytes:
        return None
    return (saved_bytes - inputs_bytes) / (first_bytes - inputs_bytes) + SAME_SET_MARGIN


def levels_out_of_reach(
    prior: Sequence[Trial], kept_level: Optional[float], budget: int, offset_for: OffsetFor
) -> tuple[Trial, ...]:
    """The trials whose recompute levels a re-plan under a new calibration
    (``offset_for``: its peak offset for a level's partition) need not
    partition again: those the earlier plans of the
    same graph (``prior``: every trial they predicted, tried or carried
    over; ``kept_level``, the level the last one kept) planned with offload
    as far as it went and still found over ``budget`` by more than
    ``REACH_MARGIN`` once its peak is moved to the new offset. The kept
    level is never skipped (it is the fallback where nothing reaches), nor
    offload alone, nor any level a lower offset brings back within reach."""
    limit = budget * (1 + REACH_MARGIN)
    return tuple(
        t for t in prior
        if t.level is not None and t.level != kept_level and t.peak_at(offset_for(t.level)) > limit
    )


def levels_to_retry(skipped: Sequence[Trial], lowest_peak: int, offset_for: OffsetFor) -> tuple[Trial, ...]:
    """Where no level a re-plan partitioned reaches the budget, the plan
    keeps the lowest predicted peak (``choose_trial``), so the levels it
    skipped as out of reach (``skipped``, from ``levels_out_of_reach``)
    count again: those whose trial, moved to the new calibration's peak
    offset for its level (``offset_for``), stands below ``lowest_peak`` (the
    lowest of the trials partitioned). Their predictions are an earlier
    calibration's; under the new one the kept level may have risen past
    them."""
    return tuple(t for t in skipped if t.peak_at(offset_for(t.level)) < lowest_peak)


def recompute_entries(
    first_saved: Sequence[SavedTensor], first_entries: Sequence[PlanEntry], saved_now: set[str], trial: Trial
) -> list[PlanEntry]:
    """The activations the first partition saved that ``trial``'s partition
    does not: the partitioner recomputes them in backward. Their entries
    from the first plan, with decision ``recompute`` (``Reason.RECOMPUTED``)."""
    if trial.level is None:
        return []
    activations = {t.name for t in first_saved if t.kind == SavedKind.ACTIVATION}
    if isinstance(trial.level, BlockCut):
        code, values = Reason.BLOCK_RECOMPUTED, detail(cut=trial.level, peak=trial.peak)
    else:
        code, values = Reason.RECOMPUTED, detail(level=trial.level, peak=trial.peak)
    return [
        dataclasses.replace(e, decision=Decision.RECOMPUTE, code=code, detail=values)
        for e in first_entries
        if e.name in activations and e.name not in saved_now
    ]


def newly_saved(first_saved: Sequence[SavedTensor], entries: Sequence[PlanEntry]) -> tuple[str, ...]:
    """The tensors a partition under a recompute level saves that the first
    partition did not (``entries``: the kept partition's plan, before its
    ``recompute`` entries join it): what the backward recomputes from. They
    take back part of what the recomputed tensors free, so a report of the
    recomputed bytes alone overstates what recompute saves."""
    first = {t.name for t in first_saved}
    return tuple(e.name for e in entries if e.name not in first)
