"""Stage 3c, schedules: where each release and reload goes.

Takes: the copies' lifetimes (``lifetimes.CopyLifetime``), the node times the
step simulator uses (``step_model.NodeTimes``: measured kernels, estimates,
a calibration) and the device profile (``cost_model``), the simulated memory with
every copy off the device between its uses, and the ceiling (that profile's
peak; for the reloads, plus ``OffloadConfig.reload_headroom`` up to a
budget: ``scheduling.schedule_copies``). Gives:

- ``schedule_reloads(...)`` / ``schedule_releases(...)``: pure functions over
  those numbers. Each reload is issued just early enough to land before its
  consumer (reloads queue on one host->device stream); each release goes
  where its copy-out is predicted to have landed. Neither may lift device
  memory above the ceiling.
- ``reload_ceiling(...)``: the memory the reloads may lift the backward to
  (the ideal's peak plus the headroom, never past a budget), the one rule for
  the rewrite and the selection's search.
- ``release_schedule`` / ``reload_schedule``: the same on real graphs;
  releases go to slots that split no fused kernel, reloads count their bytes
  from where Inductor's generated code runs them (``inductor_model``).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from typing import Optional, Sequence, Union

import torch.fx as fx

from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.inductor_model import in_place_slots, safe_slots
from offload_pass.planning.lifetimes import CopyLifetime

__all__ = [
    "CopyOut", "Reload", "release_schedule", "reload_ceiling", "reload_schedule", "schedule_releases", "schedule_reloads",
]

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


def _latest_starts(
    node_ms: Sequence[float], reloads: Sequence[Reload], h2d_bytes_per_ms: float, margin: float
) -> tuple[list[float], list[float]]:
    """Start time of each node, and the latest start of each reload: copies
    run one after the other on the host->device stream, so each bound comes
    from the last reload backwards."""
    start = [0.0, *itertools.accumulate(node_ms)]
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
    """
    start, latest = _latest_starts(node_ms, reloads, h2d_bytes_per_ms, margin)
    if prefetch_bytes is None and safe is None:
        fits = _at_latest_starts_if_they_fit(start, latest, base_live, reloads, ceiling, first)
        if fits is not None:
            return fits
    placer = _ReloadPlacer(start, list(base_live), ceiling, first, prefetch_bytes, safe)
    issue: dict[str, int] = {}
    floor = first
    for r, latest_start in zip(reloads, latest):
        floor = placer.place(r, latest_start, floor)
        issue[r.key] = floor
    return issue


def _at_latest_starts_if_they_fit(
    start: Sequence[float],
    latest: Sequence[float],
    base_live: Sequence[int],
    reloads: Sequence[Reload],
    ceiling: int,
    first: int,
) -> Optional[dict[str, int]]:
    """``schedule_reloads``' result where no reload has to wait for room
    (no ``prefetch_bytes``, every slot in place): each reload at the last
    node starting by its latest start, not before the one before it. None
    where those reloads together would lift memory over ``ceiling``
    somewhere. Why that is the placer's result: the placer adds the reloads
    one by one and only ever adds bytes, so if every reload fits with all of
    them placed, each fitted when it was placed and none was moved. The
    common case (reloads with room under the ceiling), in one pass over the
    backward instead of one per reload: the selection's search simulates
    thousands of sets."""
    issue: dict[str, int] = {}
    delta = [0] * (len(base_live) + 1)
    floor = first
    for r, latest_start in zip(reloads, latest):
        consumer = max(r.consumer, floor)
        at = max(bisect.bisect_right(start, latest_start, floor, consumer + 1) - 1, floor)
        issue[r.key] = floor = at
        delta[at] += r.nbytes
        delta[consumer] -= r.nbytes
    in_flight = 0
    for live, d in zip(base_live, delta):
        in_flight += d
        if in_flight and live + in_flight > ceiling:
            return None
    return issue


@dataclasses.dataclass
class _ReloadPlacer:
    """``schedule_reloads``' state as it places the reloads in consumer order:
    ``live[i]`` counts the bytes of the reloads placed so far, and
    ``outstanding`` holds their (consumer, bytes)."""

    start: Sequence[float]  # start time of each node
    live: list[int]
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
        for k in range(start_at, consumer):
            self.live[k] += r.nbytes
        return at

    def _past_overflow(self, nbytes: int, at: int, consumer: int) -> int:
        """Memory: past the last point in [at, consumer) it would overflow."""
        for k in range(consumer - 1, at - 1, -1):
            if self.live[k] + nbytes > self.ceiling:
                return k + 1
        return at

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
            if all(self.live[k] + nbytes <= self.ceiling for k in range(start_at, at)) and (
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


@dataclasses.dataclass(frozen=True)
class CopyOut:
    key: str  # the copy's storage name
    nbytes: int
    issued: int  # index of the node after which the copy starts (its producer)
    free_from: int  # first index after which the release may go (last forward use)


def schedule_releases(
    node_ms: Sequence[float],
    base_live: Sequence[int],
    copies: Sequence[CopyOut],
    d2h_bytes_per_ms: float,
    ceiling: int,
    margin: float = RELOAD_MARGIN,
    safe: Optional[Sequence[bool]] = None,
) -> dict[str, int]:
    """For each forward copy, the index of the node its release goes after.

    ``base_live[i]``: device bytes at forward node i with every offloaded
    tensor freed right after ``free_from``. ``safe[i]``: may a release go
    after node i without splitting a fused kernel (default: everywhere).

    Copies run one after the other on the device->host stream from the end of
    their producer, so they land in issue order. The forward is walked in
    order on an estimated clock that includes the waits the releases cause.
    After each safe node, every copy past its last forward use that has
    landed is released: the compute stream's wait for it costs nothing.
    Holding a copy keeps its bytes alive; before a node where the copies
    still held would lift memory above ``ceiling``, the oldest of them are
    released at the last safe slot before it, as few as bring memory under
    the ceiling (the compute stream then waits for the newest of those).
    Oldest first because they land first, so the wait is the shortest, and
    because waiting for one copy waits for every older one too: releasing
    those at the same point costs nothing more. A release never goes before
    ``free_from``; what is left at the end is released after the last node.
    """
    last = len(node_ms) - 1
    if last < 0:
        return {}
    safe = list(safe) if safe is not None else [True] * len(node_ms)
    safe[last] = True
    order = sorted(copies, key=lambda c: c.issued)
    issued_at: dict[int, list[CopyOut]] = {}
    for c in order:
        issued_at.setdefault(c.issued, []).append(c)
    rank = {c.key: i for i, c in enumerate(order)}
    walk = _ReleaseWalk(base_live, ceiling, safe, rank, margin, d2h_bytes_per_ms)
    for k, ms in enumerate(node_ms):
        walk.release_over_ceiling(k)
        walk.run(ms, issued_at.get(k, ()))
        if safe[k]:
            walk.release_landed(k, k == last)
    for c in walk.held:  # last used by the last node
        walk.release[c.key] = max(c.free_from, last)
    return walk.release


@dataclasses.dataclass
class _ReleaseWalk:
    """``schedule_releases``' walk over the forward on an estimated clock:
    the copies issued and not released, when each lands, the end of each node
    walked (waits included) and the releases placed."""

    base_live: Sequence[int]
    ceiling: int
    safe: list[bool]
    rank: dict[str, int]  # each copy's place in issue order
    margin: float
    d2h_bytes_per_ms: float
    # Issued and not released, in issue order.
    held: list[CopyOut] = dataclasses.field(default_factory=list)
    landed: dict[str, float] = dataclasses.field(default_factory=dict)
    # The estimated end of each node walked, waits included.
    ends: list[float] = dataclasses.field(default_factory=list)
    release: dict[str, int] = dataclasses.field(default_factory=dict)
    clock: float = 0.0
    stream_free: float = 0.0
    held_bytes: int = 0  # the bytes of ``held``

    def release_over_ceiling(self, k: int) -> None:
        """Before node k: where the copies held would lift memory above the
        ceiling, release the oldest, as few as bring it under, at the last
        safe slot before k; the clock waits for the newest of them."""
        # Every copy held within the ceiling: none of them can lift it over
        # (the selection's searches walk this once per node per set tried).
        if self.base_live[k] + self.held_bytes > self.ceiling:
            self._release_over(k)

    def _release_over(self, k: int) -> None:
        holding = [c for c in self.held if c.free_from < k]
        over = self.base_live[k] + sum(c.nbytes for c in holding) - self.ceiling
        slot = k - 1
        while slot >= 0 and not self.safe[slot]:
            slot -= 1
        if over > 0 and slot >= 0:
            newest = _newest_to_release(holding, over, slot)
            if newest is not None:
                newest_rank = self.rank[newest.key]
                oldest = [c for c in self.held if c.free_from <= slot and self.rank[c.key] <= newest_rank]
                self._release(oldest, slot)
                # The compute stream waits after ``slot`` for the newest one;
                # what ran since then runs that much later.
                self.clock += max(0.0, self.landed[newest.key] - self.ends[slot])

    def run(self, ms: float, issued: Sequence[CopyOut]) -> None:
        """The next node runs for ``ms``; then the copies it produces start."""
        self.clock += ms
        self.ends.append(self.clock)
        for c in issued:
            self.stream_free = max(self.clock, self.stream_free) + self.margin * c.nbytes / self.d2h_bytes_per_ms
            self.landed[c.key] = self.stream_free
            self.held.append(c)
            self.held_bytes += c.nbytes

    def release_landed(self, k: int, last: bool) -> None:
        """After safe node k: every copy past its last forward use that has
        landed (every one, after the ``last`` node). ``held`` is in issue
        order and the copies land in that order: the first not landed ends
        the look."""
        landed = []
        for c in self.held:
            if not last and self.landed[c.key] > self.clock:
                break
            if c.free_from <= k:
                landed.append(c)
        self._release(landed, k)

    def _release(self, copies: list[CopyOut], slot: int) -> None:
        for c in copies:
            self.release[c.key] = slot
            self.held.remove(c)
            self.held_bytes -= c.nbytes


def _newest_to_release(holding: list[CopyOut], over: int, slot: int) -> Optional[CopyOut]:
    """The newest of the oldest copies in ``holding`` (in issue order) whose
    release may go after ``slot`` and that free ``over`` bytes together (as
    many as there are, if fewer do); None if none may go there."""
    newest, freed = None, 0
    for c in holding:
        if freed >= over:
            break
        if c.free_from <= slot:
            newest, freed = c, freed + c.nbytes
    return newest


def release_schedule(
    fw_gm: fx.GraphModule,
    lifetimes: Sequence[CopyLifetime],
    forward_live: Sequence[int],
    ceiling: int,
    profile: DeviceProfile,
    node_ms: Sequence[float],
) -> dict[str, str]:
    """The cost model's release points for one forward graph: ``{storage:
    name of the forward node its release goes after}``.

    ``forward_live[i]``: predicted device bytes at forward node i with every
    offloaded tensor freed right after its last forward use. ``node_ms``:
    the time of each node (output aside), the step simulator's
    (``NodeTimes.ordered``), so that releases go where the simulator that
    chose the copies predicts them.
    """
    nodes = [n for n in fw_gm.graph.nodes if n.op != "output"]
    copies = [CopyOut(lt.storage, lt.nbytes, lt.produced, lt.last_forward_use) for lt in lifetimes]
    # A release inside a fused chain would split its kernel (one more round
    # trip to memory, and in low precision another rounding): releases go
    # after the chain, or before it where after would lift memory above the
    # ceiling.
    safe = safe_slots(nodes)
    release = schedule_releases(
        node_ms[: len(nodes)], forward_live, copies, profile.bytes_per_ms("d2h"), ceiling, safe=safe
    )
    return {key: nodes[i].name for key, i in release.items()}
