"""Stage 3d, automatic selection (``OffloadConfig(mode="auto" | "budget")``):
which of the candidate copies to make.

Takes: plain numbers, a ``StepWithoutOffload`` (node times of the forward
and backward graphs, device bytes alive at each point without offload, the
copy bandwidth per direction) and per candidate copy its bytes, producer,
last forward use and first backward consumer. Gives: the chosen set, with
the search model's estimate of its step time and peak. Those estimates only
choose: the plan reports the step simulator's prediction over the rewritten
graphs (``step_model``).

The search model (``simulate_offload``): each copy's runtime ops cost what
the step simulator charges them (compute-stream time per op, the host's
time to issue them where the device waits for the host). Copies queue one
after the other on the device->host stream from the end of their producer.
Each is released where the rewrite releases it
(``schedules.schedule_releases``, the one rule for that): once it has
landed, or earlier, the compute stream waiting for it,
where the copies still held would lift memory over the peak of the ideal
(every copy off from its last forward use); the forward's clock includes
those waits. A copy's device memory is free from its release until its
reload is issued. Each reload is issued where the rewrite issues it
(``schedules.schedule_reloads`` under ``schedules.reload_ceiling``, the one
rule for that): as late as lands it before its consumer, later where memory
would rise over the ideal's peak plus the reload headroom; reloads queue on
the host->device stream and the backward waits at a consumer whose reload
has not landed. The step is forward + backward compute plus those waits and
the runtime ops' time; the peak is the highest point of memory over the
step.

``choose_auto`` maximises the peak reduction with the predicted step within
``max_overhead`` of no offload; ``choose_for_budget`` reaches a peak budget
with the least predicted step time. Both are greedy (one candidate at a
time, the best by their criterion; auto's the better of that and the
earliest-produced copies first, the budget's the better of a search led
by the peak and one led by the bytes over the budget at every point);
``tests/test_selection.py`` checks them against brute force on small cases.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from typing import Optional, Sequence, Union

from offload_pass.planning.lifetimes import CopyLifetime, off_device_points
from offload_pass.planning.schedules import (
    RELOAD_MARGIN, CopyOut, Reload, reload_ceiling, schedule_releases, schedule_reloads,
)

__all__ = ["Candidate", "Estimate", "StepWithoutOffload", "candidates", "simulate_offload", "choose_auto", "choose_for_budget"]


# How far over a budget the lowest peak ``_lowest_peak`` finds may stand for
# the greedy searches to try it all the same: on 1000 random draws like
# ``tests/test_selection.py``'s, in the 239 whose lowest peak found stood
# 3 % or more over the ideal, it was the lowest of every subset's in 231, at most 6.5 %
# above it.
OUT_OF_REACH_MARGIN = 0.10


@dataclasses.dataclass(frozen=True)
class Candidate:
    key: str  # the copy's storage name
    nbytes: int
    produced: int  # forward node index of its producer
    free_from: int  # forward node index of its last forward use
    consumer: int  # backward node index of its first consumer (len(bw) if none)


@dataclasses.dataclass(frozen=True)
class Estimate:
    step_ms: float
    peak: int
    forward_wait_ms: float
    backward_wait_ms: float
    after: tuple[int, ...] = ()  # device bytes at each point, the copies made

    def excess(self, level: int) -> int:
        """Bytes over ``level``, summed over the points: what a budget still
        has to lose. Unlike the peak, a copy that covers some of several
        points at the peak lowers it."""
        return sum(v - level for v in self.after if v > level)


@dataclasses.dataclass(frozen=True)
class StepWithoutOffload:
    fw_ms: Sequence[float]  # per forward point
    bw_ms: Sequence[float]  # per backward point
    live: Sequence[int]  # bytes alive at each forward point, then each backward point
    d2h_bytes_per_ms: float
    h2d_bytes_per_ms: float
    # What each copy's runtime ops cost, as the step simulator charges them
    # (``step_model``; 0 and empty: nothing): the compute stream's time at
    # its forward ops (offload, release: a calibration's ``forward_op_ms``
    # each) and at its backward ops (reload, wait_reload), and the host's
    # time to issue its forward ops, which idles the device where the host
    # is not ahead of it (``fw_host_ms``: the host's time per forward point).
    # Without them the search chose sets the simulator then put over the
    # limit and trimmed to nothing (decoder, H200, auto 1 %: eight copies,
    # +2.5 % predicted against +0.5 % allowed, kept none).
    copy_ms: float = 0.0
    reload_ms: float = 0.0
    copy_host_ms: float = 0.0
    fw_host_ms: Sequence[float] = ()
    # What bounds the reloads, as the rewrite bounds them
    # (``schedules.reload_ceiling``, ``OffloadConfig.prefetch_bytes``): the
    # headroom over the ideal's peak (bytes, or a share of the bytes
    # offloaded), a budget they may not lift memory past, the bytes of
    # reloads in flight. Without them the search let every reload start
    # as early as the host->device stream needed, memory no object: on
    # ResNet-50 (H200, everything copied, reloads four times the backward)
    # it predicted 4.5 GiB where the rewrite holds the reloads back to
    # 1.8 GiB at the same step, and called budgets out of reach that offload
    # reaches.
    reload_headroom: Union[int, float] = 0
    reload_target: Optional[int] = None
    prefetch_bytes: Optional[int] = None

    # The clocks of the step without offload, computed once: the searches
    # simulate thousands of sets over the same step (a CPU profile of an
    # 8-layer HF Llama's budget compile: 15 000), and these were a fifth of
    # their time.
    @functools.cached_property
    def fw_end(self) -> list[float]:
        """The end of each forward node, from the forward's start."""
        return _ends(self.fw_ms)

    @functools.cached_property
    def bw_end(self) -> list[float]:
        return _ends(self.bw_ms)

    @functools.cached_property
    def bw_start(self) -> list[float]:
        return [e - t for e, t in zip(self.bw_end, self.bw_ms)]

    @functools.cached_property
    def host_bound(self) -> "_RangeMax":
        """Per forward point k that runs on the device: when the host has
        issued it plus the device's time from it to the forward's end, the
        earliest the forward can end through k (the device starts no node
        before the host issued it); -inf elsewhere. The forward's end is
        the largest of these and the device's own time."""
        total = self.fw_end[-1] if self.fw_ms else 0.0
        bound, host = [], 0.0
        for ms, end, host_ms in zip(self.fw_ms, self.fw_end, self.fw_host_ms):
            host += host_ms
            bound.append(host + total - (end - ms) if ms > 0 else float("-inf"))
        return _RangeMax(bound)


class _RangeMax:
    """The largest of ``values[a..b]`` in constant time (a sparse table)."""

    def __init__(self, values: Sequence[float]):
        self.levels = [list(values)]
        width = 1
        while 2 * width <= len(values):
            below = self.levels[-1]
            self.levels.append([max(below[i], below[i + width]) for i in range(len(values) - 2 * width + 1)])
            width *= 2

    def __call__(self, a: int, b: int) -> float:
        """The largest of points ``a`` to ``b``, both included; -inf where empty."""
        b = min(b, len(self.levels[0]) - 1)
        if a > b:
            return float("-inf")
        level = (b - a + 1).bit_length() - 1
        row = self.levels[level]
        return max(row[a], row[b - (1 << level) + 1])


def _forward_with_ops(step: StepWithoutOffload, order: Sequence[Candidate]) -> float:
    """The forward's end, copy waits aside, with the runtime ops of the
    copies ``order`` (sorted by producer): each copy's ops cost the compute
    stream ``copy_ms`` and delay the host by ``copy_host_ms`` for every
    node after its producer. The device runs a node once it is done with
    the one before and the host has issued it, so the forward ends at the
    latest, over the points k, of the host's issue of k plus the device's
    time from k on (``host_bound``), each moved by the ops before k: their
    host time, less their compute-stream time (which the device had spent
    before k anyway), plus every op's compute-stream time."""
    total = step.fw_end[-1] if step.fw_ms else 0.0
    ops_ms = len(order) * step.copy_ms
    if not step.fw_host_ms:
        return total + ops_ms
    shift = step.copy_host_ms - step.copy_ms
    bound = step.host_bound
    end, start = total, 0
    for count, c in enumerate(order):
        end = max(end, bound(start, c.produced) + count * shift)
        start = c.produced + 1
    end = max(end, bound(start, len(step.fw_ms) - 1) + len(order) * shift)
    return end + ops_ms


def _ends(ms: Sequence[float]) -> list[float]:
    out, total = [], 0.0
    for t in ms:
        total += t
        out.append(total)
    return out


def _ideal_off(step: StepWithoutOffload, chosen: Sequence[Candidate]) -> list[int]:
    """Bytes of ``chosen`` off the device at each point if every copy left
    right after its last forward use and came back just before its first
    backward use (``lifetimes.ideal_live``'s bound, by its rule)."""
    delta = [0] * (len(step.live) + 1)
    for c in chosen:
        a, b = off_device_points(c.free_from, c.consumer, len(step.fw_ms))
        delta[a] += c.nbytes
        delta[b] -= c.nbytes
    off, total = [], 0
    for d in delta[:-1]:
        total += d
        off.append(total)
    return off


def _forward(step: StepWithoutOffload, order: Sequence[Candidate], ideal: Sequence[int]) -> tuple[dict[str, int], float]:
    """Where the rewrite releases each chosen copy (``order``: sorted by
    producer) in the forward, and the
    forward's end with the waits those releases cause. The releases are
    placed by ``schedules.schedule_releases``, the rule the rewrite itself
    follows: a copy is released once it has landed, or earlier, with the
    compute stream waiting for it, where the copies still held would lift
    memory over the peak of the ideal (every copy off from its last forward
    use). Copies queue on the device->host stream from the end of their
    producer on the walked clock, waits included. ``ideal``: the device
    bytes at each point with the copies off over their ideal intervals."""
    ceiling = max(ideal, default=0)
    fast = _released_as_they_land(step, order, ideal, ceiling)
    return fast if fast is not None else _scheduled(step, order, ideal, ceiling)


def _released_as_they_land(
    step: StepWithoutOffload, order: Sequence[Candidate], ideal: Sequence[int], ceiling: int
) -> Optional[tuple[dict[str, int], float]]:
    """``_scheduled``'s result where no release has to come early: each copy
    released after the first node (not before its last forward use) by
    whose end ``schedule_releases`` deems it landed, the forward waiting
    only, at its end, for the copies still running. None where the copies
    held would lift memory over ``ceiling`` somewhere (the search then walks
    ``schedule_releases`` itself). The common case, and a walk-free one."""
    fw_end = step.fw_end
    n_fw = len(fw_end)
    if not n_fw:
        return None
    stream = landed = 0.0
    margined = 0.0
    release: dict[str, int] = {}
    held = [0] * (n_fw + 1)
    for c in order:
        duration = c.nbytes / step.d2h_bytes_per_ms
        stream = max(fw_end[c.produced], stream) + duration
        landed = max(landed, stream)
        margined = max(fw_end[c.produced], margined) + RELOAD_MARGIN * duration
        at = min(bisect.bisect_left(fw_end, margined, c.free_from), n_fw - 1)
        release[c.key] = at
        # Held over the ideal before each node after its last forward use, up to its release.
        held[c.free_from + 1] += c.nbytes
        held[at + 1] -= c.nbytes
    extra = 0
    for k in range(n_fw):
        extra += held[k]
        if k and ideal[k] + extra > ceiling:
            return None
    return release, max(fw_end[-1], landed)


def _scheduled(
    step: StepWithoutOffload, order: Sequence[Candidate], ideal: Sequence[int], ceiling: int
) -> tuple[dict[str, int], float]:
    """The releases ``schedule_releases`` places, and the forward walked on
    the copies' real landing times with the waits they cause."""
    copies = [CopyOut(c.key, c.nbytes, c.produced, c.free_from) for c in order]
    release = schedule_releases(step.fw_ms, ideal[: len(step.fw_ms)], copies, step.d2h_bytes_per_ms, ceiling)
    issued: dict[int, list[Candidate]] = {}
    released: dict[int, list[Candidate]] = {}
    for c in order:
        issued.setdefault(c.produced, []).append(c)
        released.setdefault(release[c.key], []).append(c)
    clock = stream = 0.0
    landed: dict[str, float] = {}
    for k, ms in enumerate(step.fw_ms):
        clock += ms
        for c in issued.get(k, ()):
            stream = max(clock, stream) + c.nbytes / step.d2h_bytes_per_ms
            landed[c.key] = stream
        for c in released.get(k, ()):
            clock = max(clock, landed[c.key])
    return release, clock


def simulate_offload(step: StepWithoutOffload, chosen: Sequence[Candidate]) -> Estimate:
    """Estimated step time and peak with ``chosen`` offloaded."""
    live = step.live
    n_fw = len(step.fw_ms)
    fw_total = step.fw_end[-1] if n_fw else 0.0
    bw_total = step.bw_end[-1] if step.bw_ms else 0.0
    order = sorted(chosen, key=lambda c: (c.produced, c.key))
    ideal = [a - b for a, b in zip(live, _ideal_off(step, order))] if order else list(live)
    release, forward_end = _forward(step, order, ideal) if order else ({}, fw_total)
    forward_wait = max(0.0, forward_end - fw_total)
    # The waits on the device's clock, added to the forward as the host
    # and the ops leave it (both, not the larger: a wait late in the
    # forward does not give back idling early in it).
    forward_ms = _forward_with_ops(step, order)
    issue, backward_wait = _backward(step, order, ideal)
    delta = [0] * (len(live) + 1)
    for c in chosen:
        delta[min(release[c.key] + 1, n_fw)] += c.nbytes  # free after the node it is released after
        if c.key in issue:  # on the device again from where its reload is issued
            delta[n_fw + issue[c.key]] -= c.nbytes
    after, off = [], 0
    for a, d in zip(live, delta):
        off += d
        after.append(a - off)
    total = forward_ms + bw_total + forward_wait + backward_wait + len(issue) * step.reload_ms
    return Estimate(total, max(after, default=0), forward_wait, backward_wait, tuple(after))


def _backward(step: StepWithoutOffload, order: Sequence[Candidate], ideal: Sequence[int]) -> tuple[dict[str, int], float]:
    """Where the rewrite issues the reload of each chosen copy read in
    backward (``schedules.schedule_reloads`` under
    ``schedules.reload_ceiling``: as late as lands it before its consumer,
    later where memory would rise over the ideal's peak plus the headroom),
    and the backward's waits for them: reloads queue on the host->device
    stream from where they are issued on the backward's clock, and the
    backward waits at a consumer for its reload to land."""
    n_fw, n_bw = len(step.fw_ms), len(step.bw_ms)
    reloads = sorted(
        (Reload(c.key, c.nbytes, c.consumer) for c in order if c.consumer < n_bw), key=lambda r: (r.consumer, r.key)
    )
    if not reloads:
        return {}, 0.0
    ceiling = reload_ceiling(
        max(ideal, default=0), step.reload_headroom, sum(c.nbytes for c in order), step.reload_target
    )
    issue = schedule_reloads(
        step.bw_ms, ideal[n_fw:], reloads, step.h2d_bytes_per_ms, ceiling, prefetch_bytes=step.prefetch_bytes
    )
    # Events in the order the backward meets them: before node k, the
    # reloads issued there, then the waits of its consumers.
    events = sorted(
        [(issue[r.key], 0, r) for r in reloads] + [(r.consumer, 1, r) for r in reloads],
        key=lambda e: (e[0], e[1]),
    )
    start = step.bw_start
    wait = stream = 0.0
    landed: dict[str, float] = {}
    for k, is_use, r in events:
        clock = start[k] + wait
        if is_use:
            wait += max(0.0, landed[r.key] - clock)
        else:
            stream = max(clock, stream) + r.nbytes / step.h2d_bytes_per_ms
            landed[r.key] = stream
    return issue, wait


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
    spend the time on a few costly copies and stop short of such a set
    (decoder, H200, max_overhead 30 %: 768 MiB freed at +22.0 % predicted,
    where the first two layers free 800 at +20.1 %)."""
    order = sorted(candidates, key=lambda c: (c.produced, c.key))
    base = simulate_offload(step, [])
    limit = base.step_ms * (1 + max_overhead)
    best: tuple[list[Candidate], Estimate] = ([], base)
    for k in range(1, len(order) + 1):
        p = simulate_offload(step, order[:k])
        if p.step_ms <= limit + 1e-9 and (p.peak, p.step_ms) < (best[1].peak, best[1].step_ms):
            best = (order[:k], p)
    return best


def choose_for_budget(
    step: StepWithoutOffload, candidates: Sequence[Candidate], budget: int
) -> tuple[list[Candidate], Estimate]:
    """The least predicted step time with the peak at most ``budget`` bytes:
    the better of two greedy searches (``_greedy_for_budget``), one led by
    the peak, one by the bytes over the budget at every point. If the
    budget cannot be met, the result is the lowest peak reached; the caller
    compares it with the budget. Below the ideal peak of every candidate
    (``_ideal_peak``), no set meets it: ``_lowest_peak``, without a search;
    nor where the lowest peak that search finds stands over the budget by
    more than ``OUT_OF_REACH_MARGIN``. That search costs one simulation per
    candidate; each greedy step costs one per candidate left, and where the
    budget is out of reach the greedy runs to the last candidate, swaps
    included: on a ResNet-50's forward and backward (104 candidates, 3874
    points, the copies taking seven times the forward), about 12,000
    simulations, 440 s, for a peak the lowest-peak search had found in 2 s.
    Otherwise its set is a third result beside the greedy searches'."""
    lowest = _lowest_peak(step, candidates)
    if _ideal_peak(step, candidates) > budget or lowest[1].peak > budget * (1 + OUT_OF_REACH_MARGIN):
        return lowest
    results = [_greedy_for_budget(step, candidates, budget, peak_first) for peak_first in (True, False)]
    results.append(lowest)
    return min(results, key=lambda r: (r[1].peak > budget, r[1].step_ms if r[1].peak <= budget else r[1].peak))


def _ideal_peak(step: StepWithoutOffload, chosen: Sequence[Candidate]) -> int:
    """The peak with ``chosen`` off the device from each one's last forward
    use to its first backward use: no set of them has a lower one."""
    return max((a - b for a, b in zip(step.live, _ideal_off(step, chosen))), default=0)


def _lowest_peak(step: StepWithoutOffload, candidates: Sequence[Candidate]) -> tuple[list[Candidate], Estimate]:
    """A budget below every set's ideal peak is out of reach: the set with
    the lowest peak instead, without the greedy searches (which run to the
    last candidate there: an 8-layer HF Llama's budget 0.4 compiled for
    over 490 s on the H200, 78-83 s without them). Every candidate, then each dropped, the
    last needed in backward first, where that lowers the peak (their
    reloads, issued early enough to land in time, can lift the backward
    over the ideal). Only a lower peak drops one: dropping copies for time
    at an equal peak walked, on the H200's decoder at budget 0.2, into a set
    whose peak this model saw flat and the step simulator did not (the
    re-plan's offload-alone trial predicted at 2.57 GiB, the first plan's
    at 1.06). On 400 random draws like those of
    ``tests/test_selection.py`` the peak found was the lowest of every
    subset's in 398, at most 2.9 % above it."""
    chosen = list(candidates)
    current = simulate_offload(step, chosen)
    for c in sorted(candidates, key=lambda c: (-c.consumer, c.key)):
        rest = [k for k in chosen if k is not c]
        p = simulate_offload(step, rest)
        if p.peak < current.peak:
            chosen, current = rest, p
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
    budget is met, copies it is met without are dropped.

    Each step evaluates the candidates lazily, in the order of the score
    each had when last evaluated, and stops once the best score found is at
    least the last score of every candidate not evaluated again: a copy
    mostly gains less once others took part of its bytes. Where one gains
    more (copies that only lower the peak together), the step can take
    another; where none is found, every candidate is evaluated, as before.
    Against evaluating every candidate at every step: the same choices on
    the 219 reachable budgets of 400 random draws like
    ``tests/test_selection.py``'s, and on the thirty-third session's
    ResNet-50 searches (H200) the same step within 0.2 % with 2-4 x fewer
    simulations (3.4 GiB budget, 25 copies chosen: 1410 against 5066)."""
    run = functools.partial(simulate_offload, step)
    chosen: list[Candidate] = []
    current = run([])
    remaining = list(candidates)
    never_scored = (True, math.inf)
    last_score = {c.key: never_scored for c in remaining}
    while current.peak > budget and remaining:
        best: Optional[tuple[tuple[bool, float], Candidate, Estimate]] = None
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
        if best is None:
            # Stuck above the budget: copies queue behind each other, so a
            # copy chosen early can block a better one. Swap one out for one
            # not chosen if that lowers the peak, then go on adding.
            swap = _best_swap(chosen, remaining, current, run)
            if swap is None:
                break
            out, into, current = swap
            chosen[chosen.index(out)] = into
            remaining[remaining.index(into)] = out
            last_score = {c.key: never_scored for c in remaining}
            continue
        chosen.append(best[1])
        remaining.remove(best[1])
        current = best[2]
    if current.peak <= budget:
        chosen, current = _drop_unneeded(chosen, current, budget, run)
    return chosen, current


def _drop_unneeded(chosen: list[Candidate], current: Estimate, budget: int, run) -> tuple[list[Candidate], Estimate]:
    """Drop, newest first, each chosen copy the budget is met without and
    the step is no slower without: an early pick the later ones made
    unnecessary."""
    for c in list(reversed(chosen)):
        rest = [k for k in chosen if k is not c]
        p = run(rest)
        if p.peak <= budget and p.step_ms <= current.step_ms:
            chosen, current = rest, p
    return chosen, current


def _best_swap(chosen, remaining, current: Estimate, run):
    best = None
    for out in chosen:
        for into in remaining:
            p = run([c for c in chosen if c is not out] + [into])
            if p.peak < current.peak and (best is None or (p.peak, p.step_ms) < (best[2].peak, best[2].step_ms)):
                best = (out, into, p)
    return best


def candidates(lifetimes: Sequence[CopyLifetime]) -> list[Candidate]:
    """The copies' lifetimes as ``Candidate``s, indexed like
    ``timeline.simulate_step``'s points (each graph's nodes, output aside)."""
    return [
        Candidate(
            lt.storage, lt.nbytes, lt.produced, lt.last_forward_use,
            lt.first_backward_use if lt.first_backward_use is not None else lt.backward_points,
        )
        for lt in lifetimes
    ]
