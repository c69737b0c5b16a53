"""Stage 3b, the plan: which saved tensors go to host memory.

Takes: ``SavedTensor`` records (plain data) and an ``OffloadConfig``. Gives: an
``OffloadPlan`` with one entry per saved value (decision and reason) and the
storage groups to copy. A pure function: no graph, no tracing, no device.

Rules, in order: only activations (never parameters, buffers, graph inputs,
model outputs or symbolic ints); only what a mark asked to offload; never what
an opt-out asked to keep; tensors sharing one storage move together or not at
all (keeping one keeps the storage alive, so moving the others would free
nothing); a storage smaller than ``min_bytes`` stays; the first
``keep_first_in_backward`` storages the backward needs stay (they would be
reloaded as soon as the backward starts).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import TYPE_CHECKING, Optional, Sequence

from offload_pass.config import OffloadConfig
from offload_pass.enums import CopyKind, Decision, Mode, ReplanReason, SavedKind
from offload_pass.planning.saved_set import SavedTensor
from offload_pass.units import format_bytes, mib

if TYPE_CHECKING:
    from offload_pass.planning.calibration import Calibration, PredictionCheck
    from offload_pass.planning.recompute import Trial
    from offload_pass.planning.step_model import StepPrediction

__all__ = ["PlanEntry", "OffloadGroup", "OffloadPlan", "plain_inductor_plan", "plan_saved_tensors", "eligibility"]

log = logging.getLogger("offload_pass")


@dataclasses.dataclass(frozen=True)
class PlanEntry:
    name: str
    op: str
    module: str
    role: Optional[str]
    shape: tuple
    dtype: str
    nbytes: int
    decision: Decision
    reason: str
    storage: str


@dataclasses.dataclass(frozen=True)
class OffloadGroup:
    """One copy to host: the saved tensors sharing one storage.

    copy == "tensor": the single member is copied as it is.
    copy == "storage": the storage owner is copied once and every member is
    rebuilt in backward as a view of the reloaded owner (a lone view too,
    when it lies densely over all of its storage: the same bytes).
    copy == "each": members are copied one by one (views with symbolic
    sizes, or of another dtype than the owner, cannot be rebuilt from it).
    """

    storage: str
    members: tuple[str, ...]
    copy: CopyKind
    nbytes: int


@dataclasses.dataclass
class OffloadPlan:
    graph_id: str
    entries: list[PlanEntry]
    groups: list[OffloadGroup]
    rewritten: bool = True
    # The step simulator's prediction (step_model.predict_step) of the step
    # without offload and of the rewritten one: what every report quotes.
    # Set by the backend; None for a bare plan.
    baseline: Optional[StepPrediction] = None
    prediction: Optional[StepPrediction] = None
    # schedule="cost": the peak with every copy off the device from its last
    # forward use to its first backward use, the bound the releases and
    # reloads were placed under.
    ideal_peak: Optional[int] = None
    # How far above ideal_peak the reloads were allowed to lift memory:
    # OffloadConfig.reload_headroom in bytes (schedules.reload_ceiling),
    # less what would pass a budget.
    reload_headroom: int = 0
    # The cost model's schedule: storage -> the forward node its release goes
    # after / the backward node its reload is issued before.
    release_after: dict = dataclasses.field(default_factory=dict)
    reload_before: dict = dataclasses.field(default_factory=dict)
    # mode="auto" / "budget": what the selection chose, and why.
    selection: Optional[str] = None
    # mode="budget": the peak to reach, bytes (scheduling.budget_bytes).
    budget: Optional[int] = None
    # mode="auto": the slowdown allowed (OffloadConfig.max_overhead), which
    # the measured step is checked against (calibration.overhead_as_measured).
    max_overhead: Optional[float] = None
    # mode="auto": the slowdown over the predicted step without offload the
    # selection could spend (calibration.overhead_allowed): max_overhead, or
    # max_overhead of plain Inductor's step where that was measured.
    overhead_allowed: Optional[float] = None
    # mode="budget" past what offload alone reaches: the activation_memory_budget
    # PyTorch's partitioner ran under for this plan (planning/recompute.py),
    # every partition tried, as predicted (the first is offload alone), and
    # in a re-plan the earlier plans' trials of the levels it did not try again.
    recompute_level: Optional[float] = None
    # The saved tensors of this partition the first did not save, what the
    # backward recomputes from (recompute.newly_saved).
    saved_for_recompute: tuple[str, ...] = ()
    recompute_trials: tuple["Trial", ...] = ()
    recompute_skipped: tuple["Trial", ...] = ()
    # On CUDA (compiled_graph.py): the step simulator's prediction against
    # the median of three measured calls of this graph, and the calibration
    # this plan was planned under (None: planned from the estimates and
    # measured kernels; ``calibration.carried``: the scales an earlier
    # compile of the same graph fitted, compiled_graph.carried_calibration).
    measured: Optional["PredictionCheck"] = None
    calibration: Optional["Calibration"] = None
    replan_reason: Optional[ReplanReason] = None  # why it was planned again (with ``calibration``)
    # Set by the rewrite: (bytes, slots) of the host buffer the copies of one
    # call are laid out in (copies of symbolic size are allocated apart).
    host_pool: Optional[tuple[int, int]] = None
    # Copy groups whose decision a prediction may change (eligible, and past
    # keep_first_in_backward). 0: every plan of this graph copies nothing,
    # whatever the step simulator says, so a re-plan could only compile the
    # same graph again (calibration.replan_reason). None: not counted (a plan
    # built elsewhere than plan_saved_tensors), which forbids nothing.
    candidates: Optional[int] = None
    # mode="auto" on CUDA: measured over max_overhead and not planned again,
    # what the graph runs instead and why (``calibration.choose_fallback``);
    # None: it runs this plan.
    fallback: Optional[str] = None
    # The modules with an op in the forward graph (saved_set.traced_modules):
    # the step report tells a marked module that ran inside this graph and
    # saved nothing from one Dynamo ran outside the compiled graphs.
    modules: frozenset[str] = frozenset()

    @property
    def predicted_reduction(self) -> Optional[int]:
        if self.baseline is None or self.prediction is None:
            return None
        return self.baseline.peak - self.prediction.peak

    @property
    def predicted_overhead(self) -> Optional[float]:
        """The predicted slowdown of the rewritten step (0.02 = 2 %); None
        without predictions."""
        if self.baseline is None or self.prediction is None:
            return None
        return self.prediction.step_ms / self.baseline.step_ms - 1 if self.baseline.step_ms else 0.0

    @property
    def offloaded(self) -> list[str]:
        return [e.name for e in self.entries if e.decision == Decision.OFFLOAD]

    @property
    def offloaded_bytes(self) -> int:
        return sum(g.nbytes for g in self.groups)

    @property
    def recomputed(self) -> list[str]:
        return [e.name for e in self.entries if e.decision == Decision.RECOMPUTE]

    @property
    def recomputed_bytes(self) -> int:
        """Bytes of the first partition's saved tensors this one recomputes."""
        return sum(e.nbytes for e in self.entries if e.decision == Decision.RECOMPUTE)

    @property
    def saved_for_recompute_bytes(self) -> int:
        """Bytes this partition newly saves for the recompute: the saved
        bytes fall by ``recomputed_bytes`` less these."""
        new = set(self.saved_for_recompute)
        return sum(e.nbytes for e in self.entries if e.name in new)

    @property
    def kept_without_gain(self) -> list[PlanEntry]:
        """Marked tensors the keep_if_no_gain trim kept on device."""
        return [e for e in self.entries if e.reason == NO_GAIN_REASON]

    @property
    def kept_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries if e.decision == Decision.KEEP)

    def entry(self, name: str) -> PlanEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no saved tensor named {name!r}; saved: {[e.name for e in self.entries]}")

    def __str__(self) -> str:
        title = f"offload plan {self.graph_id}" + ("" if self.rewritten else " (rewrite disabled)")
        return "\n".join([title, *self._table(), *self._summary()])

    def _table(self) -> list[str]:
        header = ("saved", "op", "module", "role", "shape", "dtype", "MiB", "decision", "reason")
        rows = [
            (
                e.name, e.op, e.module or "-", e.role or "-", "x".join(str(s) for s in e.shape) or "-",
                e.dtype, f"{mib(e.nbytes):.2f}", e.decision, e.reason,
            )
            for e in self.entries
        ]
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]

    def _summary(self) -> list[str]:
        lines = [
            f"offloaded {mib(self.offloaded_bytes):.2f} MiB in {len(self.groups)} copies "
            f"({len(self.offloaded)} saved tensors); kept {mib(self.kept_bytes):.2f} MiB"
        ]
        no_gain = self.kept_without_gain
        if no_gain:
            lines.append(
                f"kept {len(no_gain)} marked tensors ({mib(sum(e.nbytes for e in no_gain)):.2f} MiB) "
                "because offloading them would not lower the predicted peak; "
                "make_backend(keep_if_no_gain=False) offloads them anyway"
            )
        if self.recompute_level is not None:
            recomputed, newly = self.recomputed_bytes, self.saved_for_recompute_bytes
            lines.append(
                f"recomputed {len(self.recomputed)} saved tensors ({mib(recomputed):.2f} MiB) "
                f"in backward: partitioned under activation_memory_budget={self.recompute_level:g}; "
                f"it saves {len(self.saved_for_recompute)} tensors ({mib(newly):.2f} MiB) the first partition "
                f"did not, which the recompute starts from: {mib(recomputed - newly):.2f} MiB less saved in all"
            )
        if self.host_pool:
            nbytes, slots = self.host_pool
            lines.append(f"host pool {mib(nbytes):.2f} MiB per call ({slots} slots, page-aligned)")
        if self.selection is not None:
            lines.append(self.selection)
        if self.baseline is not None and self.prediction is not None:
            lines.extend(self._prediction_lines(self.baseline, self.prediction))
        if self.calibration is not None and self.calibration.carried:
            lines.append(f"planned under the calibration of an earlier compile, {self.calibration.describe()}")
        elif self.calibration is not None:
            lines.append(f"planned again{_replanned_because(self.replan_reason)}, {self.calibration.describe()}")
        if self.measured is not None:
            lines.append(self.measured.describe())
        if self.fallback is not None:
            lines.append(f"not run: {self.fallback}")
        return lines

    def _prediction_lines(self, before: StepPrediction, after: StepPrediction) -> list[str]:
        bound = "" if self.ideal_peak is None else f"; every copy off the device between its uses: {mib(self.ideal_peak):.2f} MiB"
        if self.ideal_peak is not None and self.reload_headroom:
            share = f", {self.reload_headroom / self.offloaded_bytes:.1%} of the bytes offloaded" if self.offloaded_bytes else ""
            bound += f", reloads allowed {format_bytes(self.reload_headroom)} above it (reload_headroom{share})"
        change = f" ({self.predicted_overhead:+.1%})" if before.step_ms else ""
        return [
            f"predicted peak {mib(before.peak):.2f} -> {mib(after.peak):.2f} MiB "
            f"(-{mib(before.peak - after.peak):.2f} MiB){bound}",
            f"predicted step {before.step_ms:.2f} -> {after.step_ms:.2f} ms{change}",
            f"  with offload: {after.describe()}",
        ]


def _replanned_because(reason: Optional[ReplanReason]) -> str:
    from offload_pass.planning.calibration import REPLAN_TOLERANCE, STALL_TOLERANCE

    if reason == ReplanReason.PREDICTION:
        return (
            f" (the prediction was off by more than {REPLAN_TOLERANCE:.0%}, or its stalls on copies by more "
            f"than {STALL_TOLERANCE:.0%} of the step)"
        )
    if reason == ReplanReason.BUDGET:
        return " (the measured peak was over the budget)"
    if reason == ReplanReason.OVERHEAD:
        return (
            " (the measured step was over max_overhead: over plain Inductor's graph measured beside it, or, "
            "where that was not measured, its stalls on copies and its forward past the device's speed by more "
            f"than {STALL_TOLERANCE:.0%} of the step)"
        )
    if reason == ReplanReason.PEAK:
        return f" (the peak of the plan before, itself a re-plan, was off by more than {REPLAN_TOLERANCE:.0%})"
    if reason == ReplanReason.ROOM:
        return (
            " (the measured step was under max_overhead against plain Inductor's graph measured beside it by "
            "more than the room margin, with copies left to choose: it spends the rest)"
        )
    return ""

AUTO_CANDIDATE = "candidate of mode=auto (nothing marked)"
PLAIN_FALLBACK_REASON = "kept: the graph runs plain Inductor's compile (mode=auto fell back)"


def plain_inductor_plan(plan: OffloadPlan, graph_id: str, fallback: str, measured: "PredictionCheck") -> OffloadPlan:
    """The plan of plain Inductor's compile of ``plan``'s graph, which
    mode="auto" falls back to (``fallback``: why): every entry kept (none
    offloaded, none recomputed), the step without offload as predicted,
    and ``measured``, plain Inductor's graph measured against it."""
    entries = [
        e if e.decision == Decision.KEEP else dataclasses.replace(e, decision=Decision.KEEP, reason=PLAIN_FALLBACK_REASON)
        for e in plan.entries
    ]
    return dataclasses.replace(
        plan, graph_id=graph_id, entries=entries, groups=[], prediction=plan.baseline,
        ideal_peak=None, reload_headroom=0, release_after={}, reload_before={},
        selection=f"mode=auto fell back from {plan.graph_id}, {fallback}", recompute_level=None,
        saved_for_recompute=(), recompute_trials=(), recompute_skipped=(), measured=measured, calibration=None,
        replan_reason=None, host_pool=None, fallback=None,
    )


# Namespaces of the ops that distributed engines put in graphs (functional
# collectives, c10d, FSDP, DTensor).
COLLECTIVE_NAMESPACES = frozenset(
    {"c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "_dtensor", "fsdp"}
)


def eligibility(t: SavedTensor, unmarked_are_candidates: bool = False) -> tuple[bool, str]:
    """Whether one saved tensor may be offloaded on its own, and why (not).
    ``unmarked_are_candidates``: mode "auto"/"budget" with nothing marked,
    where every activation is a candidate."""
    if t.kind == SavedKind.SYMINT:
        return False, "symbolic int"
    if t.kind == SavedKind.PARAMETER:
        return False, "parameter or buffer"
    if t.kind == SavedKind.INPUT:
        return False, "graph input" if not t.is_view else "view of a graph input"
    if t.kind == SavedKind.OUTPUT:
        return False, "model output (or shares its storage)"
    if t.on_host:
        return False, "already in host memory"
    if t.lazy_bit:
        return False, "conjugate or negated view (lazy bit): the copy ops cannot take one"
    if t.op.split(".")[0] in COLLECTIVE_NAMESPACES:
        # A collective's output (tensor or sequence parallel traces them into
        # the graph) belongs to the communication schedule: never moved.
        return False, f"output of a collective ({t.op})"
    if t.asked == Decision.KEEP:
        return False, f"kept by {t.asked_by}"
    if t.asked is None and not (unmarked_are_candidates and not t.asked_by):
        return False, t.asked_by or "not marked"
    if not t.symbolic and t.nbytes == 0:
        return False, "empty tensor"
    return True, f"offloaded by {t.asked_by}" if t.asked else AUTO_CANDIDATE


def _copy_group(
    storage: str, members: list[SavedTensor], verdicts: dict[str, tuple[bool, str]], config: OffloadConfig
) -> tuple[Optional[OffloadGroup], dict[str, tuple[Decision, str]]]:
    """The copy of one storage's saved members, or None with the reason each
    member stays on device (one blocked member keeps them all)."""
    blocked = [m for m in members if not verdicts[m.name][0]]
    if blocked:
        b = blocked[0]
        return None, {
            m.name: (Decision.KEEP, verdicts[m.name][1] if not verdicts[m.name][0]
                     else f"shares storage with {b.name} ({verdicts[b.name][1]})")
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
        return None, {m.name: (Decision.KEEP, f"below min_bytes ({nbytes} < {config.min_bytes})") for m in members}
    return OffloadGroup(storage, tuple(m.name for m in members), copy, nbytes), {}


def plan_saved_tensors(
    saved: Sequence[SavedTensor], config: OffloadConfig, graph_id: str = ""
) -> OffloadPlan:
    # Automatic modes choose among the marked tensors, or among all of them
    # when nothing is marked.
    unmarked = config.mode != Mode.MARKED and not any(t.asked == Decision.OFFLOAD for t in saved)
    verdicts = {t.name: eligibility(t, unmarked) for t in saved}
    by_storage: dict[str, list[SavedTensor]] = {}
    for t in saved:
        if t.kind != SavedKind.SYMINT:
            by_storage.setdefault(t.storage, []).append(t)

    decisions: dict[str, tuple[Decision, str]] = {}
    groups: list[OffloadGroup] = []
    candidates: list[tuple[list[SavedTensor], OffloadGroup]] = []
    order = {t.name: i for i, t in enumerate(saved)}
    for storage, members in by_storage.items():
        group, kept = _copy_group(storage, members, verdicts, config)
        decisions.update(kept)
        if group is not None:
            candidates.append((members, group))

    def first_use(members: list[SavedTensor]) -> float:
        uses = [m.backward_first_use for m in members if m.backward_first_use >= 0]
        return min(uses) if uses else math.inf

    candidates.sort(key=lambda c: first_use(c[0]))
    head = config.keep_first_in_backward
    for rank, (members, group) in enumerate(candidates):
        if rank < head:
            for m in members:
                decisions[m.name] = (
                    Decision.KEEP,
                    f"needed first in backward (keep_first_in_backward={head}): "
                    "its reload would start with the backward",
                )
            continue
        for m in members:
            decisions[m.name] = (Decision.OFFLOAD, verdicts[m.name][1])
        groups.append(group)
    groups.sort(key=lambda g: order[g.members[0]])

    entries = []
    for t in saved:
        decision, reason = decisions.get(t.name, (Decision.KEEP, verdicts[t.name][1]))
        entries.append(
            PlanEntry(t.name, t.op, t.module, t.role, t.shape, t.dtype, t.nbytes, decision, reason, t.storage)
        )
    plan = OffloadPlan(graph_id, entries, groups, candidates=max(0, len(candidates) - head))
    log.debug("offload_pass: %s", plan)
    return plan


NO_GAIN_REASON = "offloading it would not lower the predicted peak (keep_if_no_gain)"


def keep_offloads_without_gain(
    plan: OffloadPlan, live_bytes: Sequence[int], off_device: dict[str, tuple[int, int]]
) -> OffloadPlan:
    """Drop from ``plan`` the copies that do not lower the predicted peak.

    ``live_bytes``: device bytes alive at each point of one step without
    offload (``timeline.simulate_step``). ``off_device[storage] = (a, b)``: the
    points where that group's bytes would be on the host. A pure function:
    groups are tried largest first (then in order of their first backward
    use); each is kept on device if the peak with it kept stays at or below
    the peak with every copy made. A copy that frees nothing at the peak
    costs two transfers and saves nothing. Largest first because the aim is
    the fewest bytes copied for that peak: trying a small copy first can keep
    it in place of a large one that covered the same points (against brute
    force on random cases, tests/test_cost_model.py).
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
    return keep_groups(plan, dropped, NO_GAIN_REASON)


def keep_groups(plan: OffloadPlan, storages: set[str], reason: str) -> OffloadPlan:
    """``plan`` with the copies of ``storages`` kept on device, for ``reason``."""
    if not storages:
        return plan
    names = {m for g in plan.groups if g.storage in storages for m in g.members}
    entries = [
        dataclasses.replace(e, decision=Decision.KEEP, reason=reason) if e.name in names else e
        for e in plan.entries
    ]
    groups = [g for g in plan.groups if g.storage not in storages]
    return dataclasses.replace(plan, entries=entries, groups=groups)
