"""The lifetime of each copy to host: when its storage is made, last read in
forward, first read in backward, and how many bytes it moves.

Takes: the forward graph (before the rewrite), the saved set and the plan's
copy groups. Gives: one ``CopyLifetime`` per group, computed once per
compile; the no-gain trim, the ideal profile (``ideal_live``), the selection,
the release and reload schedules and the rewrite all read them, so they
agree on what "after its last forward use" means.

Points are indices into each graph's nodes, the output node aside: the same
points as ``timeline.simulate_step`` (forward points first, then backward).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch
import torch.fx as fx

from offload_pass.planning.saved_set import SavedTensor
from offload_pass.units import size_hint
from offload_pass.views import storage_root

__all__ = ["CopyLifetime", "copy_lifetimes", "ideal_live", "off_device_points"]


@dataclasses.dataclass(frozen=True)
class CopyLifetime:
    storage: str  # the copy group's storage (OffloadGroup.storage)
    nbytes: int  # bytes moved; for symbolic sizes, by their hints
    exact: bool  # False: symbolic sizes, nbytes is an estimate
    produced: int  # forward point of the storage's producer
    last_forward_use: int  # forward point of the last read of any alias (>= produced)
    first_backward_use: Optional[int]  # backward point of its first consumer; None: never read
    forward_points: int  # points in the forward graph
    backward_points: int  # points in the backward graph
    # Per member: backward point of its first consumer (None: never read); a
    # group copied member by member (copy == "each") reloads each for its own.
    member_first_use: tuple[tuple[str, Optional[int]], ...] = ()

    def first_use_of(self, members: Sequence[str]) -> Optional[int]:
        """Backward point of the first consumer of any of ``members``."""
        uses = [use for name, use in self.member_first_use if name in members and use is not None]
        return min(uses) if uses else None

    @property
    def off_device(self) -> tuple[int, int]:
        """Points ``[a, b)`` of the step where its bytes could be on the host:
        from after its last forward use to its first backward use (a reload
        landing just in time)."""
        first = self.first_backward_use if self.first_backward_use is not None else self.backward_points
        return off_device_points(self.last_forward_use, first, self.forward_points)


def off_device_points(last_forward_use: int, first_backward_point: int, forward_points: int) -> tuple[int, int]:
    """The step's points ``[a, b)`` a copy's bytes could be on the host: from
    after its last forward use to its first backward use (``first_backward_point``,
    the backward's length if none), a reload landing just in time. The one
    rule for the ideal bound (``ideal_live``, the selection's search)."""
    return last_forward_use + 1, forward_points + first_backward_point


def _hinted_bytes(val: object) -> int:
    if not isinstance(val, torch.Tensor):
        return 0
    sizes = [size_hint(s) for s in val.shape]
    if any(s is None for s in sizes):
        return 0
    numel = 1
    for s in sizes:
        numel *= s
    return numel * val.element_size()


def _copy_bytes(group, saved: dict[str, SavedTensor], fw_nodes: dict[str, fx.Node]) -> tuple[int, bool]:
    """The group's bytes and whether they are exact; a symbolic group counts
    its members' hinted sizes, so a dynamic graph's copies are not free."""
    if group.nbytes or not any(saved[m].symbolic for m in group.members if m in saved):
        return group.nbytes, True
    return sum(_hinted_bytes(fw_nodes[m].meta.get("val")) for m in group.members if m in fw_nodes), False


def copy_lifetimes(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, saved: Sequence[SavedTensor], groups: Sequence
) -> dict[str, CopyLifetime]:
    """``{group.storage: CopyLifetime}`` for the plan's ``OffloadGroup``s.
    The first backward use comes from the saved set (``SavedTensor.backward_first_use``)."""
    fw_nodes = [n for n in fw_gm.graph.nodes if n.op != "output"]
    backward_points = sum(1 for n in bw_gm.graph.nodes if n.op != "output")
    index = {n: i for i, n in enumerate(fw_nodes)}
    by_name = {n.name: n for n in fw_nodes}
    by_saved = {t.name: t for t in saved}
    last_read: dict[fx.Node, int] = {}
    for node in fw_nodes:
        for arg in node.all_input_nodes:
            last_read[storage_root(arg)[0]] = index[node]
    lifetimes = {}
    for group in groups:
        root = storage_root(by_name[group.members[0]])[0]
        produced = index[root]
        member_first_use = tuple(
            (m, by_saved[m].backward_first_use if by_saved[m].backward_first_use >= 0 else None)
            for m in group.members
        )
        uses = [use for _, use in member_first_use if use is not None]
        nbytes, exact = _copy_bytes(group, by_saved, by_name)
        lifetimes[group.storage] = CopyLifetime(
            storage=group.storage,
            nbytes=nbytes,
            exact=exact,
            produced=produced,
            last_forward_use=max(produced, last_read.get(root, produced)),
            first_backward_use=min(uses) if uses else None,
            forward_points=len(fw_nodes),
            backward_points=backward_points,
            member_first_use=member_first_use,
        )
    return lifetimes


def ideal_live(live_bytes: Sequence[int], lifetimes: Sequence[CopyLifetime]) -> list[int]:
    """``live_bytes`` (one step without offload) with each copy's bytes off
    the device over its ``off_device`` points: the profile no schedule can
    beat, whose peak is the ceiling releases may not lift, nor prefetches
    beyond ``OffloadConfig.reload_headroom``."""
    live = list(live_bytes)
    for lifetime in lifetimes:
        if not lifetime.exact:
            # Symbolic sizes: nothing is counted off (as the no-gain trim
            # does), so a dynamic graph's ceiling never rests on a guess.
            continue
        a, b = lifetime.off_device
        for i in range(a, b):
            live[i] -= lifetime.nbytes
    return live
