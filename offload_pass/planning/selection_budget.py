"""mode="budget"'s selection: reach a peak budget with the least step time.

Takes: a ``StepWithoutOffload``, the ``Candidate`` copies and the budget in
bytes. Gives ``choose_for_budget``: the chosen copies with the search
model's ``Estimate`` of their step; where the budget is out of reach, the
lowest peak found (the caller compares it with the budget). Greedy
searches; ``tests/test_selection.py`` checks them against brute force on
small cases.
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import numpy as np

from offload_pass.planning.lifetimes import off_device_points
from offload_pass.planning.selection_model import ideal_off, simulate_offload
from offload_pass.planning.selection_step import Candidate, Estimate, StepWithoutOffload

__all__ = ["OUT_OF_REACH_MARGIN", "choose_for_budget"]

# How far over a budget the lowest peak ``_lowest_peak`` finds may stand for
# the greedy searches to try it all the same: the lowest peak it finds is
# seldom more than a few per cent above the lowest of every subset's
# (``tests/test_selection.py``'s random draws).
OUT_OF_REACH_MARGIN = 0.10


def choose_for_budget(
    step: StepWithoutOffload, candidates: Sequence[Candidate], budget: int
) -> tuple[list[Candidate], Estimate]:
    """The least predicted step time with the peak at most ``budget`` bytes:
    the best of the searches below. If the budget cannot be met, the result
    is the lowest peak reached; the caller compares it with the budget.

    - ``_lowest_peak``: every candidate, then each dropped where that lowers
      the peak; one simulation per candidate. Below the ideal peak of every
      candidate (``_ideal_peak``) no set meets the budget, nor (for the
      greedy searches) where this lowest peak stands over it by more than
      ``OUT_OF_REACH_MARGIN``: its set is the result, without a search (the
      greedy searches would run to the last candidate, swaps included:
      thousands of simulations for the peak this one finds in one pass).
      Where every candidate together stands under the budget, the budget
      is in reach and this set, which buys peak with time, is not made
      unless a search below starts from it or neither greedy search meets
      the budget: on the 8B shape at budget 0.5 its simulations, each of
      every candidate, are a third of the selection's time.
    - ``_greedy_for_budget`` led by the peak: copies added from none.
    - Where that search meets the budget with most of the candidates (more
      than half), ``_drop_for_budget`` from the lowest peak's set: the copies
      the budget can do without, dropped. Otherwise ``_greedy_for_budget``
      led by the bytes over the budget at every point. Each greedy step
      costs one simulation per candidate scored, so adding most of the
      candidates one by one costs the most where the fewest are left out:
      at budgets near the floor, on the 8B shape's 387 candidates, the
      bytes-led search costs six times the peak-led one and finds the same
      set; dropping from the lowest peak's set finds one no slower in a
      third of that time. On ``tests/test_selection.py``'s random draws the
      two choices are as often better as worse, by a few per cent."""
    every = simulate_offload(step, list(candidates))
    without: dict[str, Estimate] = {}  # the lowest peak's set less each copy: its drops' first look
    lowest = None if every.peak < budget else _lowest_peak(step, candidates, every, without)
    if lowest is not None and (
        _ideal_peak(step, candidates) > budget or lowest[1].peak > budget * (1 + OUT_OF_REACH_MARGIN)
    ):
        return lowest
    peak_led = _greedy_for_budget(step, candidates, budget, True)
    if peak_led[1].peak <= budget and 2 * len(peak_led[0]) > len(candidates):
        lowest = lowest or _lowest_peak(step, candidates, every, without)
        other = _drop_for_budget(step, lowest, budget, without)
    else:
        other = _greedy_for_budget(step, candidates, budget, False)
    results = [peak_led, other]
    if lowest is None and min(r[1].peak for r in results) > budget:
        lowest = _lowest_peak(step, candidates, every)  # within the budget: every candidate together is
    results += [] if lowest is None else [lowest]
    return min(results, key=lambda r: (r[1].peak > budget, r[1].step_ms if r[1].peak <= budget else r[1].peak))


def _ideal_peak(step: StepWithoutOffload, chosen: Sequence[Candidate]) -> int:
    """The peak with ``chosen`` off the device from each one's last forward
    use to its first backward use: no set of them has a lower one."""
    ideal = step.live_array - ideal_off(step, chosen)
    return int(ideal.max()) if len(ideal) else 0


def _ideal_peak_less(step: StepWithoutOffload, chosen_off: np.ndarray, c: Candidate) -> int:
    """``_ideal_peak`` of a set less ``c``, from the set's ``ideal_off``
    (integer bytes: the same as summing the set less ``c`` afresh). No
    estimate of that set peaks lower, so a search that needs its peak
    under a bound it stands at or over need not simulate it."""
    ideal = step.live_array - (chosen_off - ideal_off(step, [c]))
    return int(ideal.max()) if len(ideal) else 0


def _lowest_peak(
    step: StepWithoutOffload, candidates: Sequence[Candidate], every: Optional[Estimate] = None,
    without: Optional[dict[str, Estimate]] = None,
) -> tuple[list[Candidate], Estimate]:
    """A budget below every set's ideal peak is out of reach: the set with
    the lowest peak instead, without the greedy searches (which run to the
    last candidate there). Every candidate, then each dropped, the last
    needed in backward first, where that lowers the peak (their reloads,
    issued early enough to land in time, can lift the backward over the
    ideal). Only a lower peak drops one: dropping copies for time at an
    equal peak can walk into a set whose peak this model sees flat and the
    step simulator does not. A drop whose set's ideal peak
    (``_ideal_peak_less``) stands at or over the current peak could not
    lower it: not simulated. On ``tests/test_selection.py``'s random draws
    the peak found is nearly always the lowest of every subset's. ``every``:
    the estimate of every candidate, where known. ``without`` (filled where
    given): for each copy simulated once the set stood as it is returned,
    the estimate of that set less the copy (what ``_drop_for_budget``
    looks at first)."""
    chosen = list(candidates)
    current = simulate_offload(step, chosen) if every is None else every
    chosen_off = ideal_off(step, chosen)
    for c in sorted(candidates, key=lambda c: (-c.consumer, c.key)):
        if _ideal_peak_less(step, chosen_off, c) >= current.peak:
            continue  # no estimate of the set less ``c`` peaks lower
        rest = [k for k in chosen if k is not c]
        p = simulate_offload(step, rest)
        if p.peak < current.peak:
            chosen, current = rest, p
            chosen_off = chosen_off - ideal_off(step, [c])
            if without is not None:
                without.clear()  # estimated less a copy of the set before this drop
        elif without is not None:
            without[c.key] = p
    return chosen, current


def _greedy_for_budget(
    step: StepWithoutOffload, candidates: Sequence[Candidate], budget: int, peak_first: bool
) -> tuple[list[Candidate], Estimate]:
    """Add the candidate that removes the most per millisecond it adds (a
    free one first): with ``peak_first``, peak reduction where some copy
    lowers the peak; otherwise, and where none does (the peak stands at
    several points, each copy covering some), the bytes over the budget
    summed over the points (``Estimate.excess``). When no addition removes
    any, one swap of a chosen copy for another that lowers the peak. Once the
    budget is met, copies it is met without are dropped."""
    run = functools.partial(simulate_offload, step)
    chosen: list[Candidate] = []
    current = run([])
    remaining = list(candidates)
    last_score = {c.key: _NEVER_SCORED for c in remaining}
    while current.peak > budget and remaining:
        best = _best_addition(chosen, remaining, current, budget, peak_first, last_score, run)
        if best is None:
            # Stuck above the budget: copies queue behind each other, so a
            # copy chosen early can block a better one. Swap one out for one
            # not chosen if that lowers the peak, then go on adding.
            swap = _best_swap(step, chosen, remaining, current, run)
            if swap is None:
                break
            out, into, current = swap
            chosen[chosen.index(out)] = into
            remaining[remaining.index(into)] = out
            last_score = {c.key: _NEVER_SCORED for c in remaining}
            continue
        chosen.append(best[1])
        remaining.remove(best[1])
        current = best[2]
    if current.peak <= budget:
        chosen, current = _drop_unneeded(step, chosen, current, budget, run)
    return chosen, current


# A candidate's score before its first evaluation: above every real score.
_NEVER_SCORED = (True, math.inf)
_Score = tuple[bool, float]


def _best_addition(
    chosen: list[Candidate],
    remaining: list[Candidate],
    current: Estimate,
    budget: int,
    peak_first: bool,
    last_score: dict[str, _Score],
    run,
) -> Optional[tuple[_Score, Candidate, Estimate]]:
    """One step of ``_greedy_for_budget``: the candidate of ``remaining``
    with the best score, its estimate; None where none lowers what is over
    the budget. ``last_score`` (updated) holds each candidate's score when
    last evaluated.

    The candidates are evaluated lazily, in the order of their last score,
    and the look stops once the best score found is at least the last score
    of every candidate not evaluated again: a copy mostly gains less once
    others took part of its bytes. Where one gains more (copies that only
    lower the peak together), the step can take another; where none is
    found, every candidate was evaluated. On ``tests/test_selection.py``'s
    random draws it makes the same choices as evaluating every candidate at
    every step, with a few times fewer simulations."""
    best: Optional[tuple[_Score, Candidate, Estimate]] = None
    over = current.excess(budget)
    for c in sorted(remaining, key=lambda c: last_score[c.key], reverse=True):
        if best is not None and best[0] >= last_score[c.key]:
            break
        p = run(chosen + [c])
        peak_gain, excess_gain = current.peak - p.peak, over - p.excess(budget)
        if excess_gain <= 0:
            last_score[c.key] = (False, -math.inf)
            continue
        cost = max(p.step_ms - current.step_ms, 1e-6)
        by_peak = peak_first and peak_gain > 0
        score = (by_peak, (peak_gain if by_peak else excess_gain) / cost)
        last_score[c.key] = score
        if best is None or score > best[0]:
            best = (score, c, p)
    return best


def _drop_for_budget(
    step: StepWithoutOffload, start: tuple[list[Candidate], Estimate], budget: int,
    known: Optional[dict[str, Estimate]] = None,
) -> tuple[list[Candidate], Estimate]:
    """From ``start`` (a set within ``budget``), drop the copy whose removal
    saves the most predicted step time with the peak still within the
    budget, one at a time (one that saves nothing goes too: the same step
    with fewer copies), until every removal would cost time or lift the
    peak over the budget. Scored lazily as
    ``_best_addition`` scores: a removal mostly saves less once others
    were removed, so the look stops once the best saving found is at least
    the last saving of every copy not scored again. A copy whose removal
    lifted the peak over the budget is not scored again: further drops put
    more bytes back on the device (on ``tests/test_selection.py``'s random
    draws at budgets near the lowest peak, the same sets in 395 of 395; on
    the 8B shape at 64k tokens, 30 % fewer simulations), nor is one whose
    set's ideal peak (``_ideal_peak_less``) stands over the budget
    simulated: no estimate of it peaks lower. ``known``: estimates
    of ``start``'s set less a copy, by the copy's key, taken instead of
    simulating that set again (``_lowest_peak``'s ``without``): the first
    look scores every copy, before any drop."""
    chosen, current = list(start[0]), start[1]
    if current.peak > budget:
        return chosen, current
    last_saving = {c.key: math.inf for c in chosen}
    known = dict(known or {})
    chosen_off = ideal_off(step, chosen)
    while chosen:
        best: Optional[tuple[float, Candidate, Estimate]] = None
        for c in sorted(chosen, key=lambda c: last_saving[c.key], reverse=True):
            if last_saving[c.key] == -math.inf or best is not None and best[0] >= last_saving[c.key]:
                break  # in order: every copy left lifted the peak over the budget when last scored
            p = known.pop(c.key, None)
            if p is None and _ideal_peak_less(step, chosen_off, c) > budget:
                last_saving[c.key] = -math.inf  # its removal lifts even the ideal over the budget
                continue
            p = simulate_offload(step, [k for k in chosen if k is not c]) if p is None else p
            saving = current.step_ms - p.step_ms if p.peak <= budget else -math.inf
            last_saving[c.key] = saving
            if saving >= 0 and (best is None or saving > best[0]):
                best = (saving, c, p)
        if best is None:
            break
        chosen, current = [k for k in chosen if k is not best[1]], best[2]
        chosen_off = chosen_off - ideal_off(step, [best[1]])
    return chosen, current


def _drop_unneeded(
    step: StepWithoutOffload, chosen: list[Candidate], current: Estimate, budget: int, run
) -> tuple[list[Candidate], Estimate]:
    """Drop, newest first, each chosen copy the budget is met without and
    the step is no slower without: an early pick the later ones made
    unnecessary. One whose set's ideal peak without it stands over the
    budget is needed: not simulated."""
    chosen_off = ideal_off(step, chosen)
    for c in list(reversed(chosen)):
        if _ideal_peak_less(step, chosen_off, c) > budget:
            continue
        rest = [k for k in chosen if k is not c]
        p = run(rest)
        if p.peak <= budget and p.step_ms <= current.step_ms:
            chosen, current = rest, p
            chosen_off = chosen_off - ideal_off(step, [c])
    return chosen, current


# ``_best_swap`` tries every pair where there are at most this many; beyond,
# only the ``SWAP_WIDTH`` largest copies off the device at the peak go in.
SWAP_PAIRS = 512
SWAP_WIDTH = 8


def _best_swap(step: StepWithoutOffload, chosen, remaining, current: Estimate, run):
    """The swap of a chosen copy for one not chosen that lowers the peak
    most (then the step), or None. Every pair on a small search; on a large
    one (every pair is a simulation: hundreds of chosen copies times
    hundreds not chosen) a heuristic lets in only the ``SWAP_WIDTH``
    largest copies whose own bytes could be off the device at the current
    peak's point. A copy that cannot leave the device there lowers the peak
    only through what it moves of the others (the queues, the reloads'
    ceiling): left untried. A pair whose set's ideal peak (``_ideal_peak``:
    no estimate of that set peaks lower) stands at or over the current
    peak, or over the best swap's, could not be taken: it is not simulated
    (on the 8B shape's stuck searches at 16k tokens, four pairs in five)."""
    entering = remaining if len(chosen) * len(remaining) <= SWAP_PAIRS else _at_the_peak(step, remaining, current)
    live, chosen_off = step.live_array, ideal_off(step, chosen)
    entering_off = {c.key: ideal_off(step, [c]) for c in entering}
    best = None
    for out in chosen:
        without_out = live - (chosen_off - ideal_off(step, [out]))
        for into in entering:
            ideal_peak = int((without_out - entering_off[into.key]).max()) if len(live) else 0
            if ideal_peak >= current.peak or (best is not None and ideal_peak > best[2].peak):
                continue
            p = run([c for c in chosen if c is not out] + [into])
            if p.peak < current.peak and (best is None or (p.peak, p.step_ms) < (best[2].peak, best[2].step_ms)):
                best = (out, into, p)
    return best


def _at_the_peak(step: StepWithoutOffload, remaining: Sequence[Candidate], current: Estimate) -> list[Candidate]:
    """The ``SWAP_WIDTH`` largest of ``remaining`` whose time off the device
    (``lifetimes.off_device_points``) covers the point where ``current``
    peaks (its first, where several tie)."""
    peak_at = int(current.after.argmax())
    spans = ((c, off_device_points(c.free_from, c.consumer, len(step.fw_ms))) for c in remaining)
    covering = [c for c, (a, b) in spans if a <= peak_at < b]
    return sorted(covering, key=lambda c: (-c.nbytes, c.key))[:SWAP_WIDTH]
