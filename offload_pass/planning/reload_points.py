"""Where each reload is issued in the backward.

Takes: the backward's node times (the step simulator's), the device bytes
alive at each backward node with every reload landing at its consumer, the
copies to reload (``Reload``: bytes and first consumer), the host->device
bandwidth and the ceiling memory may not pass. Gives ``schedule_reloads``
(pure, over those numbers), ``reload_ceiling`` (the ceiling: the ideal's
peak plus ``OffloadConfig.reload_headroom``, never past a budget; the one
rule for the rewrite and the selection's search) and ``reload_schedule``
(the same on a real backward graph, counting each reload's bytes from where
Inductor's generated code runs it, ``inductor_model``).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from typing import Optional, Sequence, Union

import numpy as np
import torch.fx as fx

from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.inductor_model import in_place_slots
from offload_pass.planning.lifetimes import CopyLifetime

__all__ = ["RELOAD_MARGIN", "Reload", "node_starts", "reload_ceiling", "reload_schedule", "schedule_reloads"]

# The estimates are rough (no fusion, no overlap between kernels); reloads
# start this much earlier than the estimate says they must.
RELOAD_MARGIN = 1.25


@dataclasses.dataclass(frozen=True)
class Reload:
    key: str  # the copy's storage name
    nbytes: int
    consumer: int  # index of its first consumer among the backward's nodes


def reload_ceiling(ideal_peak: int, headroom: Union[int, float], offloaded: int, target: Optional[int] = None) -> int:
    """The most device memory the reloads may lift the backward to: the
    ideal's peak (every copy off from its last forward use to its first
    backward use) plus ``headroom`` (``OffloadConfig.reload_headroom``
    resolved: bytes, or a float share of the ``offloaded`` bytes), never past
    a budget ``target`` that stands above the ideal's peak. The one rule for
    the rewrite's schedule (``scheduling``) and the selection's search."""
    extra = int(headroom * offloaded) if isinstance(headroom, float) else headroom
    ceiling = ideal_peak + extra
    return ceiling if target is None else min(ceiling, max(ideal_peak, target))


def node_starts(node_ms: Sequence[float]) -> list[float]:
    """The start of each node and the end of the last, from the first's start."""
    return [0.0, *itertools.accumulate(node_ms)]


def _latest_starts(
    node_ms: Sequence[float], reloads: Sequence[Reload], h2d_bytes_per_ms: float, margin: float,
    start: Optional[Sequence[float]] = None,
) -> tuple[Sequence[float], list[float]]:
    """Start time of each node (``start``, ``node_starts``, where known),
    and the latest start of each reload: copies run one after the other on
    the host->device stream, so each bound comes from the last reload
    backwards."""
    start = node_starts(node_ms) if start is None else start
    latest: list[float] = []
    bound = float("inf")
    for r in reversed(reloads):
        bound = min(start[r.consumer], bound) - margin * r.nbytes / h2d_bytes_per_ms
        latest.append(bound)
    latest.reverse()
    return start, latest


def _runs_from(i: int, first: int, safe: Optional[Sequence[bool]]) -> int:
    """An op issued before node i, i.e. right after node i - 1, runs after
    the last node before it that Inductor emits in place."""
    if safe is not None:
        while i > first and not safe[i - 1]:
            i -= 1
    return i


def schedule_reloads(
    node_ms: Sequence[float],
    base_live: Sequence[int],
    reloads: Sequence[Reload],
    h2d_bytes_per_ms: float,
    ceiling: int,
    first: int = 0,
    margin: float = RELOAD_MARGIN,
    prefetch_bytes: Optional[int] = None,
    safe: Optional[Sequence[bool]] = None,
    starts: Optional[Sequence[float]] = None,
) -> dict[str, int]:
    """For each reload, the index of the backward node it is issued before.

    ``node_ms[i]``: estimated time of node i. ``base_live[i]``: device bytes
    alive at node i with every reload landing exactly at its consumer.
    ``reloads`` in order of their consumers. ``first``: the first index a
    reload may be issued at (after the placeholders).

    Time: copies run one after the other on the host->device stream, so the
    latest start of each is computed from the last reload backwards; a reload
    is issued before the last node that starts no later than that.
    Memory: issuing at i keeps its bytes alive over [i, consumer); the issue
    point moves later until that fits under ``ceiling`` everywhere, and until
    the bytes of reloads issued but not yet consumed, this one included, are
    at most ``prefetch_bytes`` (a reload alone may always be issued).
    Issue points never move backwards (the stream is in order).
    ``safe[i]``: does an op placed right after node i run there
    (``inductor_model.in_place_slots``)? An op placed elsewhere runs after the last
    node before it that does: its bytes are alive from there. Such a point
    moves there (a reload a little early costs no time) when its bytes fit
    under ``ceiling`` and ``prefetch_bytes`` from there, else later, after
    the next node that runs in place.
    ``starts``: ``node_starts(node_ms)``, where the caller keeps it (the
    selection's search places reloads over one backward thousands of times).
    """
    start, latest = _latest_starts(node_ms, reloads, h2d_bytes_per_ms, margin, starts)
    placer = _ReloadPlacer(start, np.array(base_live, dtype=np.int64), ceiling, first, prefetch_bytes, safe)
    if prefetch_bytes is None and safe is None:
        return _placed_in_runs(placer, reloads, latest)
    issue: dict[str, int] = {}
    floor = first
    for r, latest_start in zip(reloads, latest):
        floor = placer.place(r, latest_start, floor)
        issue[r.key] = floor
    return issue


def _placed_in_runs(placer: "_ReloadPlacer", reloads: Sequence[Reload], latest: Sequence[float]) -> dict[str, int]:
    """``schedule_reloads``' result without a prefetch bound or Inductor's
    slots, as the placer gives it, in fewer passes: where every reload left
    fits under the ceiling at the last node starting by its latest start,
    not before the one before it (a running largest), they go there at
    once; otherwise the placer places them one by one, looking again for
    such a rest after one reload it moved, then after two, four, ...

    Why that is the placer's result: the placer adds the reloads one by one
    and only ever adds bytes, so where the reloads left, placed so, hold no
    point of their spans over the ceiling together, each fits when the
    placer comes to it; where one does, the placer moves one of them (the
    first whose span holds such a point with the bytes before it). Usually
    the reloads at the start of the backward, where memory is tightest, move
    and the rest fit: a few passes over the backward instead of one per
    reload (the selection's search simulates thousands of sets); where most
    reloads move, the looks that fail double their spacing."""
    issue: dict[str, int] = {}
    nbytes = np.array([r.nbytes for r in reloads], dtype=np.int64)
    consumer = np.array([r.consumer for r in reloads], dtype=np.int64)
    # The last node starting by each latest start, never past the consumer.
    latest_node = np.minimum(np.searchsorted(np.asarray(placer.start), np.asarray(latest), side="right") - 1, consumer)
    floor, spacing, moved = placer.first, 0, 0
    for i, r in enumerate(reloads):
        if moved >= spacing:
            at = np.maximum.accumulate(np.maximum(latest_node[i:], floor))
            if _fit(placer, at, np.maximum(consumer[i:], at), nbytes[i:]):
                issue.update(zip((r.key for r in reloads[i:]), at.tolist()))
                return issue
            spacing, moved = max(1, 2 * spacing), 0
        unmoved = max(floor, int(latest_node[i]))
        floor = issue[r.key] = placer.place(r, latest[i], floor)
        moved += floor != unmoved
    return issue


def _fit(placer: "_ReloadPlacer", at: np.ndarray, end: np.ndarray, nbytes: np.ndarray) -> bool:
    """Do these reloads, held from ``at`` to ``end``, hold no point of their
    spans over the ceiling together, over ``placer.live``?"""
    over = placer.live + _held(at, end, nbytes, len(placer.live)) > placer.ceiling
    crossed = np.concatenate(([0], np.cumsum(over)))
    return not bool((crossed[end] > crossed[at]).any())


def _held(at: np.ndarray, end: np.ndarray, nbytes: np.ndarray, points: int) -> np.ndarray:
    """The bytes of reloads held from ``at`` to ``end`` (exclusive) at each of ``points``."""
    delta = np.zeros(points + 1, dtype=np.int64)
    np.add.at(delta, at, nbytes)
    np.add.at(delta, end, -nbytes)
    return np.cumsum(delta)[:points]


@dataclasses.dataclass
class _ReloadPlacer:
    """``schedule_reloads``' state as it places the reloads in consumer order:
    ``live[i]`` counts the bytes of the reloads placed so far, and
    ``outstanding`` holds their (consumer, bytes). ``live`` is an array: each
    placement reads and adds over the span from its issue point to its
    consumer, and the selection's search places tens of thousands."""

    start: Sequence[float]  # start time of each node
    live: np.ndarray
    ceiling: int
    first: int
    prefetch_bytes: Optional[int]
    safe: Optional[Sequence[bool]]
    outstanding: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    def place(self, r: Reload, latest_start: float, floor: int) -> int:
        """The node ``r`` is issued before (not before ``floor``); its bytes
        count as live from where it runs to its consumer."""
        consumer = max(r.consumer, floor)
        # The last node starting no later than latest_start, but not before floor.
        at = bisect.bisect_right(self.start, latest_start, floor, consumer + 1) - 1
        at = self._past_overflow(r.nbytes, max(at, floor), consumer)
        if self.prefetch_bytes is not None:
            at = self._past_prefetch(r.nbytes, at, consumer)
        at, start_at = self._in_place(r.nbytes, at, consumer, floor)
        self.outstanding.append((consumer, r.nbytes))
        self.live[start_at:consumer] += r.nbytes
        return at

    def _past_overflow(self, nbytes: int, at: int, consumer: int) -> int:
        """Memory: past the last point in [at, consumer) it would overflow."""
        over = np.flatnonzero(self.live[at:consumer] > self.ceiling - nbytes)
        return at + int(over[-1]) + 1 if over.size else at

    def _past_prefetch(self, nbytes: int, at: int, consumer: int) -> int:
        """Prefetch bound: wait for earlier reloads to be consumed until this
        one fits under ``prefetch_bytes``."""
        pending = sorted((c, b) for c, b in self.outstanding if c > at)
        held = sum(b for _, b in pending)
        for c, b in pending:
            if held + nbytes <= self.prefetch_bytes:
                break
            at, held = max(at, min(c, consumer)), held - b
        return at

    def _runs_from(self, i: int) -> int:
        return _runs_from(i, self.first, self.safe)

    def _in_place(self, nbytes: int, at: int, consumer: int, floor: int) -> tuple[int, int]:
        """(issue point, where the reload runs) for the issue point ``at``."""
        start_at = self._runs_from(at)
        if start_at < at:
            # It would run at ``start_at``: keep it there if its bytes fit
            # from there, else issue it after the next node that runs in place.
            ahead = sum(b for c, b in self.outstanding if c > start_at)
            if bool((self.live[start_at:at] <= self.ceiling - nbytes).all()) and (
                self.prefetch_bytes is None or ahead == 0 or ahead + nbytes <= self.prefetch_bytes
            ):
                at = max(start_at, floor)
            else:
                while at < consumer and self._runs_from(at) < at:
                    at += 1
            start_at = self._runs_from(at)
        return at, start_at


def reload_schedule(
    bw_gm: fx.GraphModule,
    lifetimes: Sequence[CopyLifetime],
    backward_live: Sequence[int],
    ceiling: int,
    profile: DeviceProfile,
    node_ms: Sequence[float],
    prefetch_bytes: Optional[int] = None,
) -> dict[str, str]:
    """The cost model's schedule for one backward graph: ``{storage: name of
    the backward node its reload is issued before}``.

    ``lifetimes``: the copies' ``CopyLifetime``s. ``backward_live[i]``:
    predicted device bytes at backward node i with every reload landing at
    its consumer. ``node_ms``: the step simulator's time of each node, as
    for ``release_schedule``.
    """
    nodes = [n for n in bw_gm.graph.nodes if n.op != "output"]
    # A copy read by the output node alone has its first use at len(nodes).
    named = list(bw_gm.graph.nodes)
    first = next((i for i, n in enumerate(nodes) if n.op != "placeholder"), len(nodes))
    reloads = sorted(
        (Reload(lt.storage, lt.nbytes, lt.first_backward_use) for lt in lifetimes if lt.first_backward_use is not None),
        key=lambda r: r.consumer,
    )
    issue = schedule_reloads(
        node_ms[: len(nodes)], backward_live, reloads, profile.bytes_per_ms("h2d"), ceiling, first,
        prefetch_bytes=prefetch_bytes, safe=in_place_slots(nodes),
    )
    return {key: named[i].name for key, i in issue.items()}
