"""mode="budget"'s block cuts: which ``BlockCut`` partitions the recompute search makes.

Takes: the first attempt (offload on the partition as configured), a
``attempts.Run``, the budget and the number of blocks. Gives
``deep_attempts``: the block-cut attempts planned, the deepest first, then
the fewest last blocks whose plan reaches the budget (``_smallest_cut``).

A cut the run pruned (``attempts.Pruned``: it could not beat a partition
already within the budget) counts as reaching for the count search: no
cut recomputing more blocks could beat it either (each recomputes what it
does and more), so the search looks below it; where the deepest cut was
pruned, the search starts from the most blocks whose bound lets them beat
that partition (``attempts.Tried.most_blocks``), not from the middle.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from offload_pass.pipeline.attempts import Run, partition_logged
from offload_pass.pipeline.passes import PassState
from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.trial import Pruned

__all__ = ["MIX_ABOVE", "MIX_PARTITIONS", "deep_attempts", "mixed_attempts"]

# Mixed cuts are searched only where the fastest plan found within the
# budget stands more than this share above the step with nothing recomputed
# or offloaded: no plan can gain more than that, and each cut tried costs a
# partition (seconds on an 8B-sized graph).
MIX_ABOVE = 0.02
# The most partitions the mixed cuts' search makes: enough for the golden
# section to land on the least of a step that falls then rises in the
# count, over up to 32 blocks.
MIX_PARTITIONS = 7
# Golden section: each count tried lies this share of the wider side away from the best so far.
_GOLDEN = 0.382

# A count known to reach the budget (or to be pruned: its peak None) and
# one known to miss it, each with its plan's predicted peak.
Known = tuple[int, Optional[int]]


def _next_count(low: Known, high: Known, budget: int) -> int:
    """The count to try between ``low`` (count, peak over the budget) and
    ``high`` (count, peak within it): where the line through them crosses
    the budget (a cut's peak falls about linearly in the blocks it
    recomputes), strictly between the two; halfway where a peak is not known."""
    (c0, p0), (c1, p1) = low, high
    if p0 is None or p1 is None:
        guess = (c0 + c1) // 2
    else:
        guess = c0 + math.ceil((c1 - c0) * (p0 - budget) / max(p0 - p1, 1))
    return min(max(guess, c0 + 1), c1 - 1)


def _peak(attempt: PassState) -> int:
    return attempt.plan.prediction.peak


def _smallest_cut(
    first: PassState, run: Run, budget: int, of: int, keep_attention: bool, seen: set, top: int,
    known: Optional[PassState] = None,
) -> list:
    """The partitions that recompute the last ``count`` blocks, searching
    ``count`` over 1..``top`` (the most blocks worth recomputing) for the
    smallest whose plan the step simulator predicts within ``budget``, each
    guess where the line through the nearest counts known to miss and to
    reach crosses the budget (from offload alone, count 0, and the cut at
    ``top``: ``known`` where planned already, else partitioned here; one
    missing the budget ends the search): every attempt planned here."""
    if top < 1:
        return []
    attempts = []
    low: Known = (0, _peak(first))
    at_top = known or partition_logged(first, run, BlockCut(top, of, keep_attention), seen)
    if at_top is None:
        return []
    if isinstance(at_top, Pruned):
        high: Known = (top, None)
    else:
        attempts += [] if known is not None else [at_top]
        if _peak(at_top) > budget:
            return attempts
        high = (top, _peak(at_top))
    while high[0] - low[0] > 1:
        count = _next_count(low, high, budget)
        attempt = partition_logged(first, run, BlockCut(count, of, keep_attention), seen)
        if attempt is None:  # the set of a partition tried: move on as if it missed
            low = (count, low[1])
        elif isinstance(attempt, Pruned):
            high = (count, None)
        else:
            attempts.append(attempt)
            if _peak(attempt) <= budget:
                high = (count, _peak(attempt))
            else:
                low = (count, _peak(attempt))
    return attempts


def deep_attempts(
    first: PassState, run: Run, budget: int, blocks, seen: set, most: Optional[Callable[[bool], int]] = None
) -> list:
    """The block partitions (``blocks.BlockCut``): the deepest first, every
    block recomputed from its input. Where offload alone misses ``budget``
    and the deepest cut reaches it (or was pruned), for attention recomputed
    and kept alike, the fewest last blocks whose plan reaches it
    (``_smallest_cut``), searched up to ``most(keep_attention)`` blocks (the
    most whose bound lets them beat a partition within the budget; all where
    None). Where offload alone reaches it at a cost, the deepest cuts alone
    (attention recomputed, then kept): recomputing a forward can cost less
    than the copies and partial recompute the levels need. Where the deepest
    cut misses the budget, the deepest with attention kept as well: out of
    reach, the lowest peak is kept, and the two can hold the same peak (a
    loss over a large vocabulary sets it) at different steps. Nothing
    without two blocks in the graph. Returns the attempts planned."""
    if blocks is None or len(blocks) < 2:
        return []
    of = len(blocks)
    deepest = partition_logged(first, run, BlockCut(of, of), seen)
    pruned = isinstance(deepest, Pruned)
    missed = deepest is not None and not pruned and _peak(deepest) > budget
    # Out of reach (missed), the lowest peak is kept: attention kept may hold it in a shorter step.
    # The deepest cut saving a set tried before (None) may save another with attention kept.
    if missed or deepest is None or _peak(first) <= budget:
        kept = partition_logged(first, run, BlockCut(of, of, True), seen)
        return [a for a in (deepest, kept) if a is not None and not isinstance(a, Pruned)]
    attempts = [] if pruned else [deepest]
    for keep_attention in (False, True):
        known = None if keep_attention or pruned else deepest
        top = of if known is not None or most is None else most(keep_attention)
        attempts += _smallest_cut(first, run, budget, of, keep_attention, seen, top, known)
    return attempts


def _golden_counts(value: Callable[[int], float], top: int, limit: int) -> None:
    """Golden-section search of ``value`` over the counts 1..``top``: each
    count called once, at most ``limit`` of them; ties go to the fewer blocks."""
    known: dict[int, float] = {}

    def at(count: int) -> tuple[float, int]:
        if count not in known:
            known[count] = value(count)
        return known[count], count

    low, high = 0, top + 1  # the bracket's ends, neither called: 0 is no cut, high past the counts searched
    if high - low < 2 or limit < 1:
        return
    best = max(1, round(_GOLDEN * (high - low)))
    at(best)
    while high - low > 2 and len(known) < limit:
        wide_below = best - low >= high - best
        step = max(1, round(_GOLDEN * ((best - low) if wide_below else (high - best))))
        probe = best - step if wide_below else best + step
        if at(probe) < at(best):
            low, high = (low, best) if probe < best else (best, high)
            best = probe
        else:
            low, high = (probe, high) if probe < best else (low, probe)


def mixed_attempts(
    attempts: list, run: Run, budget: int, blocks, seen: set, most: Optional[Callable[[bool], int]] = None
) -> list:
    """Cuts of the last blocks, attention kept, with every node not tagged
    partitioned under one level (``BlockCut.rest``): the early blocks keep
    that level's light recompute and offload, whose copies have the rest of
    the forward to land, and the last blocks, whose copies could not, are
    recomputed. The families, in the order ``_rests`` gives:

    - the level of the fastest partition within ``budget`` among
      ``attempts`` (the first one and the levels);
    - the lightest level partitioned, where it is another: its own plan may
      miss the budget and its cuts still reach it (on the 8B shape at 16k
      tokens, at 0.25 of the peak, level 0.9 misses alone, and 16 of 32
      blocks cut under it plan 1.081 x the step, where the families before
      it kept 1.107 x);
    - the cuts with nothing else recomputed (``rest`` None: the early
      blocks offloaded as the first partition offloads), where the deepest
      cut with attention kept was planned within the budget and the first
      family is not already theirs: ``deep_attempts`` looks there only for
      the fewest blocks that reach the budget (or, where offload alone
      reaches it, at the deepest alone), which gave a looser budget a
      slower plan than a tighter one.

    Searched where the fastest partition within the budget (a block cut
    included) stands more than ``MIX_ABOVE`` over the step without
    recompute or offload: for each family, the count from 1 to
    ``most(True)`` (the most blocks whose bound lets them beat the fastest
    found; all where None) by golden section on the predicted step within
    the budget (a cut that misses it, was pruned or repeats a set tried
    counts as slowest; one planned already is not planned again), in at
    most ``MIX_PARTITIONS`` partitions. Returns the attempts planned."""
    first = attempts[0]
    if blocks is None or len(blocks) < 2 or first.plan.baseline is None:
        return []
    within = [a for a in attempts if a.plan.prediction.peak <= budget]
    levels = [a for a in within if not isinstance(a.plan.recompute_level, BlockCut)]
    base = min(levels, key=lambda a: a.plan.prediction.step_ms, default=None)
    fastest = min(a.plan.prediction.step_ms for a in within) if within else math.inf
    if base is None or fastest <= first.plan.baseline.step_ms * (1 + MIX_ABOVE):
        return []
    of = len(blocks)
    made: list = []
    planned_before = {a.plan.recompute_level: a for a in attempts}  # rest None: the plain cuts made already
    rests = _rests(attempts, base.plan.recompute_level, planned_before.get(BlockCut(of, of, True)), budget)
    for rest in rests:
        _golden_counts(_count_value(first, run, budget, of, rest, seen, planned_before, made),
                       of if most is None else min(of, most(True)), MIX_PARTITIONS)
    return made


def _rests(attempts: list, base, deepest_kept: Optional[PassState], budget: int) -> list:
    """The rests of ``mixed_attempts``' families, in the order its docstring
    lists them (``base``: the level of the fastest partition within the
    budget; ``deepest_kept``: the deepest cut with attention kept, if planned)."""
    levels = [a.plan.recompute_level for a in attempts]
    lightest = max((x for x in levels if x is not None and not isinstance(x, BlockCut)), default=None)
    rests = [base] + ([lightest] if lightest is not None and lightest != base else [])
    if base is not None and deepest_kept is not None and _peak(deepest_kept) <= budget:
        rests.append(None)
    return rests


def _count_value(
    first: PassState, run: Run, budget: int, of: int, rest, seen: set, planned_before: dict, made: list
) -> Callable[[int], float]:
    """The predicted step of the cut of the last ``count`` blocks, attention
    kept, the rest under ``rest``, within ``budget`` (inf where it misses,
    was pruned or repeats a set tried); partitioned once (``made``)."""

    def value(count: int) -> float:
        cut = BlockCut(count, of, True, rest)
        attempt = planned_before.get(cut)
        if attempt is None:
            attempt = partition_logged(first, run, cut, seen)
            if attempt is not None and not isinstance(attempt, Pruned):
                made.append(attempt)
                planned_before[cut] = attempt
        planned = attempt is not None and not isinstance(attempt, Pruned)
        return attempt.plan.prediction.step_ms if planned and _peak(attempt) <= budget else math.inf

    return value
