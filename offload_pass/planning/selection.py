"""Stage 3d, automatic selection (``OffloadConfig(mode="auto" | "budget")``):
which of the candidate copies to make.

Takes: plain numbers, a ``StepWithoutOffload`` (node times of the forward
and backward graphs, device bytes alive at each point without offload, the
copy bandwidth per direction) and per candidate copy its bytes, producer,
last forward use and first backward consumer. Gives: the chosen set, with
the search model's estimate of its step time and peak. Those estimates only
choose: the plan reports the step simulator's prediction over the rewritten
graphs (``step_model``).

The search model (``simulate_offload``): copies queue one after the other on the
device->host stream from the end of their producer; a copy's device memory
is free from the first node ending after it landed (not before its last
forward use) until its reload is issued. A copy that has not landed when the
forward's compute ends makes the forward wait for it. Reloads queue on the
host->device stream, each issued as late as lets it land before its
consumer; a chain that would have to start before the backward does makes
the backward wait that long. The step is forward + backward compute plus
those two waits; the peak is the highest point of memory over the step.

``choose_auto`` maximises the peak reduction with the predicted step within
``max_overhead`` of no offload; ``choose_for_budget`` reaches a peak budget
with the least predicted step time. Both are greedy (one candidate at a
time, the best by their criterion); ``tests/test_selection.py`` checks them
against brute force on small cases.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from typing import Optional, Sequence

from offload_pass.planning.lifetimes import CopyLifetime

__all__ = ["Candidate", "Estimate", "StepWithoutOffload", "candidates", "simulate_offload", "choose_auto", "choose_for_budget"]


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


@dataclasses.dataclass(frozen=True)
class StepWithoutOffload:
    fw_ms: Sequence[float]  # per forward point
    bw_ms: Sequence[float]  # per backward point
    live: Sequence[int]  # bytes alive at each forward point, then each backward point
    d2h_bytes_per_ms: float
    h2d_bytes_per_ms: float


def _ends(ms: Sequence[float]) -> list[float]:
    out, total = [], 0.0
    for t in ms:
        total += t
        out.append(total)
    return out


def simulate_offload(step: StepWithoutOffload, chosen: Sequence[Candidate]) -> Estimate:
    """Estimated step time and peak with ``chosen`` offloaded."""
    fw_ms, bw_ms, live = step.fw_ms, step.bw_ms, step.live
    n_fw = len(fw_ms)
    fw_end, bw_end = _ends(fw_ms), _ends(bw_ms)
    fw_total = fw_end[-1] if fw_end else 0.0
    bw_start = [e - t for e, t in zip(bw_end, bw_ms)]
    off = [0] * len(live)
    stream, last_landing = 0.0, 0.0
    released: dict[str, int] = {}
    for c in sorted(chosen, key=lambda c: (c.produced, c.key)):
        begin = max(fw_end[c.produced] if fw_end else 0.0, stream)
        stream = begin + c.nbytes / step.d2h_bytes_per_ms
        last_landing = max(last_landing, stream)
        at = bisect.bisect_left(fw_end, stream, c.free_from)
        released[c.key] = max(at, c.free_from) + 1  # free after that node
    forward_wait = max(0.0, last_landing - fw_total)
    # Backward: latest starts, from the last consumer back.
    bound = float("inf")
    issue_at: dict[str, int] = {}
    earliest_start = 0.0
    for c in sorted(chosen, key=lambda c: (c.consumer, c.key), reverse=True):
        if c.consumer >= len(bw_start):  # never read in backward: never reloaded
            issue_at[c.key] = len(bw_start)
            continue
        bound = min(bw_start[c.consumer], bound) - c.nbytes / step.h2d_bytes_per_ms
        earliest_start = min(earliest_start, bound)
        issue_at[c.key] = max(0, bisect.bisect_right(bw_start, bound) - 1)
    backward_wait = max(0.0, -earliest_start)
    for c in chosen:
        start = min(released[c.key], n_fw)
        end = n_fw + min(issue_at[c.key], c.consumer)
        for i in range(start, end):
            off[i] += c.nbytes
    peak = max((a - b for a, b in zip(live, off)), default=0)
    total = fw_total + (bw_end[-1] if bw_end else 0.0) + forward_wait + backward_wait
    return Estimate(total, peak, forward_wait, backward_wait)


def choose_auto(
    step: StepWithoutOffload, candidates: Sequence[Candidate], max_overhead: float
) -> tuple[list[Candidate], Estimate]:
    """The most peak reduction with the step at most ``1 + max_overhead``
    times the step without offload. Greedy: add the candidate that lowers
    the peak most while the step stays within the limit (ties: the cheaper
    in time); stop when none lowers it."""
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


def choose_for_budget(
    step: StepWithoutOffload, candidates: Sequence[Candidate], budget: int
) -> tuple[list[Candidate], Estimate]:
    """The least predicted step time with the peak at most ``budget`` bytes.
    Greedy: add the candidate with the most peak reduction per millisecond
    it adds (a free one first) until the budget is met; when no addition
    lowers the peak, one swap of a chosen copy for another that does. If the
    budget cannot be met, the result is the lowest peak reached; the caller
    compares it with the budget."""
    run = functools.partial(simulate_offload, step)
    chosen: list[Candidate] = []
    current = run([])
    remaining = list(candidates)
    while current.peak > budget and remaining:
        best: Optional[tuple[float, Candidate, Estimate]] = None
        for c in remaining:
            p = run(chosen + [c])
            gain = current.peak - p.peak
            if gain <= 0:
                continue
            cost = max(p.step_ms - current.step_ms, 1e-6)
            if best is None or gain / cost > best[0]:
                best = (gain / cost, c, p)
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
            continue
        chosen.append(best[1])
        remaining.remove(best[1])
        current = best[2]
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
