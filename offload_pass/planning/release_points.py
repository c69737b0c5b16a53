"""Where each copy's release goes in the forward.

Takes: the forward's node times (the step simulator's), the device bytes
alive at each forward node with every copy freed right after its last
forward use, the copies (``CopyOut``: bytes, producer, last forward use),
the device->host bandwidth and the ceiling memory may not pass. Gives
``schedule_releases`` (pure, over those numbers: a release goes where its
copy is predicted to have landed, earlier only where the copies held would
lift memory over the ceiling) and ``release_schedule`` (the same on a real
forward graph, releases only at slots that split no fused kernel,
``inductor_model``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch.fx as fx

from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.inductor_model import safe_slots
from offload_pass.planning.lifetimes import CopyLifetime
from offload_pass.planning.reload_points import RELOAD_MARGIN

__all__ = ["CopyOut", "release_schedule", "schedule_releases"]


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
    start: int = 0,
    released: Optional[dict[str, int]] = None,
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

    ``start``, ``released``: the walk resumed at node ``start``, where the
    caller knows that the walk from node 0 releases ``released`` (copy:
    node) before it, each as it lands, and nothing early: no wait, so the
    clock there is the nodes' own times summed (the selection's searches
    find that prefix without walking it, ``selection_model``).
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
    walk = _ReleaseWalk(base_live, ceiling, safe, margin, d2h_bytes_per_ms)
    if start:
        walk.resume(node_ms[:start], [c for c in order if c.issued < start], released or {})
    walk.walk(node_ms, start, issued_at)
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
    # The bytes of the copies held past their last forward use (``free_from``
    # before the node walked), and the copies held that are not yet: by the
    # node after their last forward use.
    past_use_bytes: int = 0
    past_use: set[str] = dataclasses.field(default_factory=set)
    in_use: dict[int, list[CopyOut]] = dataclasses.field(default_factory=dict)
    # ``changes`` counts the changes to ``held``. ``idle`` is left by a look
    # for landed copies that released none: (``changes`` then, the time the
    # first copy not landed lands, the first node at which a landed one is
    # past its last forward use); until one of them is reached the look
    # would release none again.
    changes: int = 0
    idle: tuple[int, float, float] = (-1, 0.0, 0.0)

    def resume(self, node_ms: Sequence[float], issued: Sequence[CopyOut], released: dict[str, int]) -> None:
        """The walk's state after ``node_ms`` ran without a wait, ``issued``
        (in issue order) copied out, the ``released`` ones released where
        they landed."""
        for ms in node_ms:
            self.clock += ms
            self.ends.append(self.clock)
        for c in issued:
            self._copy_out(c)
            if c.key in released:
                self.release[c.key] = released[c.key]
            else:
                self._hold(c)

    # Walk every node through ``release_over_ceiling`` and ``release_landed``
    # (False: only the nodes where either can act; the same releases).
    every_node = False

    def walk(self, node_ms: Sequence[float], start: int, issued_at: dict[int, list[CopyOut]]) -> None:
        """Walk nodes ``start`` on: before each, the releases memory needs;
        after it, the copies it produces start and, after a safe one, the
        landed copies go. The selection's searches walk thousands of
        forwards: the checks that find nothing to do are made here, inline."""
        last = len(node_ms) - 1
        in_use, base_live, ceiling, safe = self.in_use, self.base_live, self.ceiling, self.safe
        ends, every = self.ends, self.every_node
        for k in range(start, last + 1):
            if every or k - 1 in in_use or base_live[k] + self.past_use_bytes > ceiling:
                self.release_over_ceiling(k)
            self.clock += node_ms[k]
            ends.append(self.clock)
            issued = issued_at.get(k)
            if issued:
                for c in issued:
                    self._copy_out(c)
                    self._hold(c)
            if safe[k] and self.held:
                changes, lands, free = self.idle
                if every or k == last or changes != self.changes or self.clock >= lands or k >= free:
                    self.release_landed(k, k == last)

    def release_over_ceiling(self, k: int) -> None:
        """Before node k: where the copies held would lift memory above the
        ceiling, release the oldest, as few as bring it under, at the last
        safe slot before k; the clock waits for the newest of them."""
        for c in self.in_use.pop(k - 1, ()):
            if c.key not in self.release:
                self._past_use(c)
        # Only copies past their last forward use can go: where those held fit
        # under the ceiling there is nothing to release (the selection's
        # searches walk this once per node per set tried).
        if self.base_live[k] + self.past_use_bytes > self.ceiling:
            self._release_over(k)

    def _release_over(self, k: int) -> None:
        # The copies past their last forward use are those held from before
        # k: ``past_use_bytes`` is their bytes.
        over = self.base_live[k] + self.past_use_bytes - self.ceiling
        slot = k - 1
        while slot >= 0 and not self.safe[slot]:
            slot -= 1
        if over > 0 and slot >= 0:
            newest = _newest_to_release(self.held, over, slot)
            if newest is not None:
                # ``held`` is in issue order: the oldest are those up to the newest.
                oldest = [c for c in self.held[: newest + 1] if c.free_from <= slot]
                newest = self.held[newest]
                self._release(oldest, slot)
                # The compute stream waits after ``slot`` for the newest one;
                # what ran since then runs that much later.
                self.clock += max(0.0, self.landed[newest.key] - self.ends[slot])

    def _copy_out(self, c: CopyOut) -> None:
        """``c``'s copy queues on the device->host stream from its producer's end."""
        self.stream_free = max(self.ends[c.issued], self.stream_free) + self.margin * c.nbytes / self.d2h_bytes_per_ms
        self.landed[c.key] = self.stream_free

    def _hold(self, c: CopyOut) -> None:
        """``c`` held after the last node walked: counted past its last forward
        use from the node after that use (``release_over_ceiling``)."""
        self.held.append(c)
        self.changes += 1
        if c.free_from < len(self.ends) - 1:
            self._past_use(c)
        else:
            self.in_use.setdefault(c.free_from, []).append(c)

    def release_landed(self, k: int, last: bool) -> None:
        """After safe node k: every copy past its last forward use that has
        landed (every one, after the ``last`` node). ``held`` is in issue
        order and the copies land in that order: the first not landed ends
        the look. Where none goes, ``idle`` says from when one could."""
        landed, lands, free = [], math.inf, math.inf
        for c in self.held:
            if not last and self.landed[c.key] > self.clock:
                lands = self.landed[c.key]
                break
            if c.free_from <= k:
                landed.append(c)
            else:
                free = min(free, c.free_from)
        if landed:
            self._release(landed, k)
        else:
            self.idle = (self.changes, lands, free)

    def _release(self, copies: list[CopyOut], slot: int) -> None:
        """Release ``copies`` (held, in issue order) after ``slot``."""
        for c in copies:
            self.release[c.key] = slot
            if c.key in self.past_use:
                self.past_use.remove(c.key)
                self.past_use_bytes -= c.nbytes
        if copies and self.held[len(copies) - 1] is copies[-1]:
            del self.held[: len(copies)]  # the oldest held, as a release mostly takes
        else:
            gone = {c.key for c in copies}
            self.held = [c for c in self.held if c.key not in gone]
        self.changes += 1

    def _past_use(self, c: CopyOut) -> None:
        self.past_use.add(c.key)
        self.past_use_bytes += c.nbytes


def _newest_to_release(holding: list[CopyOut], over: int, slot: int) -> Optional[int]:
    """The place in ``holding`` (in issue order) of the newest of the oldest
    copies whose release may go after ``slot`` and that free ``over`` bytes
    together (as many as there are, if fewer do); None if none may go
    there. Copies whose release may not go there are passed over:
    ``holding`` may hold copies still in use."""
    newest, freed = None, 0
    for i, c in enumerate(holding):
        if freed >= over:
            break
        if c.free_from <= slot:
            newest, freed = i, freed + c.nbytes
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
