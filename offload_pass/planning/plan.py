"""Stage 3b, the plan: which saved tensors go to host memory.

Takes: ``SavedTensor`` records (plain data) and an ``OffloadConfig``. Gives: an
``OffloadPlan`` with one entry per saved value (decision and reason code) and
the storage groups to copy. Pure functions: no graph, no tracing, no device.

Rules, in order: only activations (never parameters, buffers, graph inputs,
model outputs or symbolic ints); only what a mark asked to offload; never what
an opt-out asked to keep; tensors sharing one storage move together or not at
all (keeping one keeps the storage alive, so moving the others would free
nothing); a storage smaller than ``min_bytes`` stays; the first
``keep_first_in_backward`` storages the backward needs stay (they would be
reloaded as soon as the backward starts). The plan's data types live in
``offload_plan``, its text in ``plan_render``, the reason codes in ``reasons``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Optional, Sequence

from offload_pass.config import OffloadConfig
from offload_pass.enums import CopyKind, Decision, Mode, NoteCode, SavedKind
from offload_pass.planning.notes import note
from offload_pass.planning.offload_plan import OffloadGroup, OffloadPlan, PlanEntry
from offload_pass.planning.reasons import Detail, Reason, detail, sentence
from offload_pass.planning.saved_set import SavedTensor

__all__ = [
    "PlanEntry", "OffloadGroup", "OffloadPlan", "plain_inductor_plan", "plan_saved_tensors", "eligibility",
    "keep_groups", "keep_offloads_without_gain",
]

log = logging.getLogger("offload_pass")

# The sentences of two reasons, for callers that print or compare them.
PLAIN_FALLBACK_REASON = sentence(Reason.PLAIN_FALLBACK)
NO_GAIN_REASON = sentence(Reason.NO_GAIN)

# Namespaces of the ops that distributed engines put in graphs (functional
# collectives, c10d, FSDP, DTensor).
COLLECTIVE_NAMESPACES = frozenset(
    {"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "_dtensor", "fsdp"}
)

# One saved tensor's verdict: may it be offloaded on its own, and why (not).
Verdict = tuple[bool, Reason, Detail]


def plain_inductor_plan(plan: OffloadPlan, graph_id: str, fallback: str) -> OffloadPlan:
    """The plan of plain Inductor's compile of ``plan``'s graph, which
    mode="auto" falls back to (``fallback``: why): every entry kept (none
    offloaded, none recomputed), the step without offload as predicted."""
    entries = [
        e if e.decision == Decision.KEEP
        else dataclasses.replace(e, decision=Decision.KEEP, code=Reason.PLAIN_FALLBACK, detail=())
        for e in plan.entries
    ]
    return dataclasses.replace(
        plan, graph_id=graph_id, entries=entries, groups=[], prediction=plan.baseline,
        ideal_peak=None, reload_headroom=0, release_after={}, reload_before={},
        notes=(note(NoteCode.FALLBACK, graph=plan.graph_id, why=fallback),), recompute_level=None,
        saved_for_recompute=(), recompute_trials=(), recompute_skipped=(), host_pool=None,
    )


def eligibility(t: SavedTensor, unmarked_candidates_of: Optional[Mode] = None) -> Verdict:
    """Whether one saved tensor may be offloaded on its own, and why (not).
    ``unmarked_candidates_of``: the mode ("auto" or "budget", nothing
    marked) under which every activation is a candidate; None where only
    marked ones are."""
    if t.kind == SavedKind.SYMINT:
        return False, Reason.SYMINT, ()
    if t.kind == SavedKind.PARAMETER:
        return False, Reason.PARAMETER, ()
    if t.kind == SavedKind.INPUT:
        return False, (Reason.INPUT_VIEW if t.is_view else Reason.GRAPH_INPUT), ()
    if t.kind == SavedKind.OUTPUT:
        return False, Reason.MODEL_OUTPUT, ()
    if t.on_host:
        return False, Reason.ON_HOST, ()
    if t.lazy_bit:
        return False, Reason.LAZY_BIT, ()
    if t.op.split(".")[0] in COLLECTIVE_NAMESPACES:
        # A collective's output (tensor or sequence parallel traces them into
        # the graph) belongs to the communication schedule: never moved.
        return False, Reason.COLLECTIVE, detail(op=t.op)
    if t.asked == Decision.KEEP:
        return False, Reason.KEPT_BY_MARK, detail(by=t.asked_by)
    if t.asked is None and not (unmarked_candidates_of is not None and not t.asked_by):
        return (False, Reason.OTHER_ROLES, detail(by=t.asked_by)) if t.asked_by else (False, Reason.NOT_MARKED, ())
    if not t.symbolic and t.nbytes == 0:
        return False, Reason.EMPTY, ()
    if t.asked:
        return True, Reason.MARKED, detail(by=t.asked_by)
    return True, Reason.UNMARKED_CANDIDATE, detail(mode=unmarked_candidates_of)


def _copy_group(
    storage: str, members: list[SavedTensor], verdicts: dict[str, Verdict], config: OffloadConfig
) -> tuple[Optional[OffloadGroup], dict[str, tuple[Decision, Reason, Detail]]]:
    """The copy of one storage's saved members, or None with the reason each
    member stays on device (one blocked member keeps them all)."""
    blocked = [m for m in members if not verdicts[m.name][0]]
    if blocked:
        b = blocked[0]
        shared = detail(**{"with": b.name, "why": verdicts[b.name][1], "why_detail": verdicts[b.name][2]})
        return None, {
            m.name: (Decision.KEEP, *verdicts[m.name][1:]) if not verdicts[m.name][0]
            else (Decision.KEEP, Reason.SHARES_STORAGE, shared)
            for m in members
        }
    if len(members) == 1:
        # A view over all of its storage is copied as its owner (same bytes).
        copy = CopyKind.STORAGE if members[0].spans_storage else CopyKind.TENSOR
        nbytes = members[0].nbytes
    elif any(m.symbolic or m.reinterpreted for m in members):
        copy, nbytes = CopyKind.EACH, sum(m.nbytes for m in members)
    else:
        copy, nbytes = CopyKind.STORAGE, members[0].storage_nbytes
    if not any(m.symbolic for m in members) and nbytes < config.min_bytes:
        small = detail(nbytes=nbytes, min_bytes=config.min_bytes)
        return None, {m.name: (Decision.KEEP, Reason.BELOW_MIN_BYTES, small) for m in members}
    return OffloadGroup(storage, tuple(m.name for m in members), copy, nbytes), {}


def _first_use(members: list[SavedTensor]) -> float:
    uses = [m.backward_first_use for m in members if m.backward_first_use >= 0]
    return min(uses) if uses else math.inf


def plan_saved_tensors(
    saved: Sequence[SavedTensor], config: OffloadConfig, graph_id: str = ""
) -> OffloadPlan:
    """One entry per saved value, decided by the rules above; the copy
    groups in the order of their first member in ``saved``."""
    # Automatic modes choose among the marked tensors, or among all of them
    # when nothing is marked.
    unmarked = config.mode != Mode.MARKED and not any(t.asked == Decision.OFFLOAD for t in saved)
    verdicts = {t.name: eligibility(t, config.mode if unmarked else None) for t in saved}
    by_storage: dict[str, list[SavedTensor]] = {}
    for t in saved:
        if t.kind != SavedKind.SYMINT:
            by_storage.setdefault(t.storage, []).append(t)

    decisions: dict[str, tuple[Decision, Reason, Detail]] = {}
    candidates: list[tuple[list[SavedTensor], OffloadGroup]] = []
    for storage, members in by_storage.items():
        group, kept = _copy_group(storage, members, verdicts, config)
        decisions.update(kept)
        if group is not None:
            candidates.append((members, group))

    candidates.sort(key=lambda c: _first_use(c[0]))
    head = config.keep_first_in_backward
    groups: list[OffloadGroup] = []
    for rank, (members, group) in enumerate(candidates):
        if rank < head:
            first = detail(keep_first=head)
            decisions.update({m.name: (Decision.KEEP, Reason.FIRST_IN_BACKWARD, first) for m in members})
            continue
        decisions.update({m.name: (Decision.OFFLOAD, *verdicts[m.name][1:]) for m in members})
        groups.append(group)
    order = {t.name: i for i, t in enumerate(saved)}
    groups.sort(key=lambda g: order[g.members[0]])

    entries = []
    for t in saved:
        decision, code, values = decisions.get(t.name, (Decision.KEEP, *verdicts[t.name][1:]))
        entries.append(
            PlanEntry(t.name, t.op, t.module, t.role, t.shape, t.dtype, t.nbytes, decision, code, t.storage, values)
        )
    plan = OffloadPlan(graph_id, entries, groups, candidates=max(0, len(candidates) - head))
    log.debug("offload_pass: %s", plan)
    return plan


def keep_offloads_without_gain(
    plan: OffloadPlan, live_bytes: Sequence[int], off_device: dict[str, tuple[int, int]]
) -> OffloadPlan:
    """Drop from ``plan`` the copies that do not lower the predicted peak.

    ``live_bytes``: device bytes alive at each point of one step without
    offload (``timeline.simulate_step``). ``off_device[storage] = (a, b)``: the
    points where that group's bytes would be on the host. Groups are tried
    largest first (then in order of their first backward use); each is kept
    on device if the peak with it kept stays at or below the peak with every
    copy made. A copy that frees nothing at the peak costs two transfers and
    saves nothing. Largest first because the aim is the fewest bytes copied
    for that peak: trying a small copy first can keep it in place of a large
    one that covered the same points (tests/test_cost_model.py checks it
    against brute force).
    """
    off = list(live_bytes)
    for group in plan.groups:
        a, b = off_device[group.storage]
        for i in range(a, b):
            off[i] -= group.nbytes
    peak = max(off, default=0)
    dropped: set[str] = set()
    for group in sorted(plan.groups, key=lambda g: (-g.nbytes, off_device[g.storage][1], off_device[g.storage][0])):
        if group.nbytes == 0:
            # Symbolic sizes (a dynamic graph): the size is unknown here, so
            # the user's mark stands (an empty tensor never reaches a group).
            continue
        a, b = off_device[group.storage]
        if a >= b or max(off[a:b]) + group.nbytes <= peak:
            for i in range(a, b):
                off[i] += group.nbytes
            dropped.add(group.storage)
    if not dropped:
        return plan
    log.debug("offload_pass: %s keeps %d copies that would not lower the peak", plan.graph_id, len(dropped))
    return keep_groups(plan, dropped, Reason.NO_GAIN)


def keep_groups(plan: OffloadPlan, storages: set[str], code: Reason, values: Detail = ()) -> OffloadPlan:
    """``plan`` with the copies of ``storages`` kept on device, for the reason ``code``."""
    if not storages:
        return plan
    names = {m for g in plan.groups if g.storage in storages for m in g.members}
    entries = [
        dataclasses.replace(e, decision=Decision.KEEP, code=code, detail=values) if e.name in names else e
        for e in plan.entries
    ]
    groups = [g for g in plan.groups if g.storage not in storages]
    return dataclasses.replace(plan, entries=entries, groups=groups)
