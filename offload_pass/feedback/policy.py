"""The re-plan policy and the fallback: what a measured plan leads to.

Takes: a ``PredictionCheck`` and what the plan promised (its budget, its
``max_overhead``). Gives: ``replan_reason`` (whether the graph is planned
once more, and why: a ``ReplanReason``), ``overhead_as_measured``,
``room_margin`` and, for mode="auto", ``choose_fallback`` (what runs in
place of a last plan measured over ``max_overhead``). A graph is planned
at most twice more; each reason at most once. Pure functions.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from offload_pass.enums import ReplanReason
from offload_pass.feedback.check import REPLAN_TOLERANCE, STALL_TOLERANCE, PredictionCheck, forward_speed
from offload_pass.planning.step_model import StepPrediction

__all__ = [
    "OVERHEAD_NOISE", "ROOM_MARGIN", "Fallback", "choose_fallback", "nothing_to_decide", "overhead_as_measured",
    "replan_reason", "room_margin",
]

# mode="auto": how far over max_overhead a plan may measure against plain
# Inductor's graph before the graph falls back: about what two compiles of
# plain Inductor measured in turns read against each other.
OVERHEAD_NOISE = 0.01
# mode="auto": a plan measured under max_overhead by more than the larger of
# these (twice the noise, a share of max_overhead), where its limit bound its
# selection and copies were left unchosen, is planned once more to spend the
# rest (``ReplanReason.ROOM``): a plan carries its first prediction's error
# into what it spends.
ROOM_MARGIN = (2 * OVERHEAD_NOISE, 0.25)


def room_margin(max_overhead: float) -> float:
    """How far under ``max_overhead`` a plan measures before it is planned again to spend the rest."""
    noise, share = ROOM_MARGIN
    return max(noise, share * max_overhead)


def nothing_to_decide(candidates: Optional[int], budget: Optional[int]) -> bool:
    """Whether every plan of a graph is the same whatever the prediction:
    no copy candidate (``OffloadPlan.candidates`` 0; None: not counted) and
    no budget to recompute for."""
    return candidates == 0 and budget is None


def overhead_as_measured(check: PredictionCheck, without_offload: StepPrediction) -> float:
    """The plan's slowdown over no offload (0.02 = 2 %) as measured: over
    plain Inductor's graph measured beside it where it was. Else its
    measured work over the step without offload as predicted at the speeds
    the device ran the plan's phases at, the forward's bounded by the
    backward's (``forward_speed``): what the measured forward took past that
    is the plan's runtime ops'. The host's time between forward and backward
    is left out of both sides."""
    if check.measured_overhead is not None:
        return check.measured_overhead
    p, m, w = check.predicted, check.measured, without_offload
    forward, backward = m.forward_ms - m.forward_wait_ms, m.backward_ms - m.backward_wait_ms
    predicted_forward, predicted_backward = p.forward_ms + p.forward_idle_ms, p.backward_ms + p.backward_idle_ms
    backward_speed = backward / predicted_backward if predicted_backward > 0 else 1.0
    forward_at = forward / predicted_forward if predicted_forward > 0 else 1.0
    base = (
        forward_speed(forward_at, backward_speed) * (w.forward_ms + w.forward_idle_ms)
        + backward_speed * (w.backward_ms + w.backward_idle_ms) + w.forward_wait_ms + w.backward_wait_ms
    )
    if base <= 0:
        return 0.0
    return (forward + backward + m.forward_wait_ms + m.backward_wait_ms) / base - 1


def replan_reason(
    check: PredictionCheck,
    budget: Optional[int],
    done: Sequence[ReplanReason],
    candidates: Optional[int] = None,
    max_overhead: Optional[float] = None,
    without_offload: Optional[StepPrediction] = None,
    chosen: Optional[int] = None,
    unspent: Optional[float] = None,
) -> Optional[ReplanReason]:
    """Why the plan ``check`` measured is planned once more (None: it is
    kept). ``budget``: mode="budget"'s peak in bytes; ``done``: the reasons
    this graph was planned again for already; ``candidates``, ``chosen``:
    the copies it could and did choose; ``unspent``: the slowdown allowed
    less the predicted. The rules, in order: nothing a prediction decides,
    never; a prediction off its tolerance, by the first re-plan
    (``PREDICTION``); a measured peak over the budget it was predicted
    within (``BUDGET``); a measured step over ``max_overhead``
    (``OVERHEAD``); room left under it (``ROOM``); a re-plan's own peak off
    its prediction (``PEAK``, second re-plan only)."""
    if nothing_to_decide(candidates, budget):
        return None  # the re-plan would compile the same graph
    if not done and not check.within():
        return ReplanReason.PREDICTION  # which corrects the peak too
    if _over_budget(check, budget, done):
        return ReplanReason.BUDGET
    if _over_overhead(check, max_overhead, without_offload, done):
        return ReplanReason.OVERHEAD
    if _room_left(check, max_overhead, done, candidates, chosen, unspent):
        return ReplanReason.ROOM
    if (
        done and len(done) < 2 and ReplanReason.PEAK not in done
        and check.peak_error is not None and abs(check.peak_error) > REPLAN_TOLERANCE
    ):
        return ReplanReason.PEAK  # the calibration's peak offset was measured where the plan before peaked
    return None


def _over_budget(check: PredictionCheck, budget: Optional[int], done: Sequence[ReplanReason]) -> bool:
    """A budget is a promise about the measured peak: a plan that predicted
    its peak within it and measured it over is planned once more (a plan
    that predicted its peak over the budget already said it cannot reach it)."""
    if check.measured.peak is None or budget is None or ReplanReason.BUDGET in done:
        return False
    return check.predicted.peak <= budget < check.measured.peak


def _over_overhead(
    check: PredictionCheck, max_overhead: Optional[float], without_offload: Optional[StepPrediction],
    done: Sequence[ReplanReason],
) -> bool:
    """mode="auto": measured over ``max_overhead`` against plain Inductor's
    graph measured beside the plan (the promise itself), or, where that was
    not measured, over it + ``STALL_TOLERANCE`` (the prediction's own noise)."""
    if max_overhead is None or without_offload is None or ReplanReason.OVERHEAD in done:
        return False
    tolerance = 0.0 if check.plain is not None else STALL_TOLERANCE
    return overhead_as_measured(check, without_offload) > max_overhead + tolerance


def _room_left(
    check: PredictionCheck, max_overhead: Optional[float], done: Sequence[ReplanReason],
    candidates: Optional[int], chosen: Optional[int], unspent: Optional[float],
) -> bool:
    """mode="auto": measured under ``max_overhead`` by more than
    ``room_margin`` against plain Inductor's graph, where the limit bound the
    selection and copies were left: not after an overhead re-plan (it spent
    the room already), and only as the first or the second re-plan."""
    measured = check.measured_overhead
    if max_overhead is None or measured is None or chosen is None or candidates is None or unspent is None:
        return False
    margin = room_margin(max_overhead)
    return (
        unspent < margin and chosen < candidates and len(done) < 2
        and ReplanReason.OVERHEAD not in done and ReplanReason.ROOM not in done
        and measured < max_overhead - margin
    )


@dataclasses.dataclass(frozen=True)
class Fallback:
    """What a graph runs in place of a plan measured over max_overhead (``choose_fallback``)."""

    plan: Optional[int]  # the index (into ``plans``) of the earlier plan run instead; None: plain Inductor's graph
    reason: str  # why, with the figures: what ``CompileRecord.fallback`` prints

    @property
    def plain(self) -> bool:
        return self.plan is None


def choose_fallback(
    plans: Sequence[tuple[str, Optional[PredictionCheck], bool]], max_overhead: float, plain_runs: bool = True
) -> Optional[Fallback]:
    """mode="auto"'s last word on a graph: ``plans`` are each plan of it
    (graph id, check or None, whether it frees anything by design), oldest
    first, the last the one running now, which will not be planned again.
    A last plan that frees nothing runs plain Inductor's graph instead (its
    Inductor options cost time for nothing). One measured over
    ``max_overhead`` + ``OVERHEAD_NOISE`` against plain Inductor's graph runs
    the earlier plan measured within that freed the most (then the least
    slowdown), else plain Inductor's graph. ``plain_runs``: the device had
    room for plain Inductor's graph (else it cannot be the fallback). None:
    the plan runs on."""
    last_id, last, last_frees = plans[-1] if plans else ("", None, True)
    limit = max_overhead + OVERHEAD_NOISE
    if last is None or last.measured_overhead is None:
        return None
    if not last_frees:
        if not plain_runs:
            return None
        return Fallback(None, (
            f"frees nothing (no copy, no recompute; measured {last.measured_overhead:+.1%} against plain Inductor's "
            "graph): runs plain Inductor's graph instead"
        ))
    if last.measured_overhead <= limit:
        return None
    over = (
        f"measured {last.measured_overhead:+.1%} against plain Inductor's graph, over max_overhead "
        f"{max_overhead:.1%} (+{OVERHEAD_NOISE:.0%} noise), and not planned again"
    )
    within = [
        (i, c) for i, (_, c, frees) in enumerate(plans[:-1])
        if frees and c is not None and c.measured_overhead is not None and c.measured_overhead <= limit
    ]
    if within:
        def most_freed_then_fastest(item: tuple[int, PredictionCheck]) -> tuple[float, float]:
            return (float(item[1].peak), item[1].measured_overhead)  # type: ignore[return-value]

        index, best = min(within, key=most_freed_then_fastest)
        return Fallback(index, f"{over}: runs {plans[index][0]}'s plan instead, measured {best.measured_overhead:+.1%}")
    if not plain_runs:
        return None
    return Fallback(None, f"{over}: no plan of this graph measured within; runs plain Inductor's graph instead")
