"""The plan as data: one entry per saved value, the copies to make, the prediction.

Takes: nothing but plain values (``plan.plan_saved_tensors`` builds it; the
schedule, the backend and the rewrite fill in their parts). Gives
``PlanEntry`` (one saved value: its decision, the reason code and the values
the reason names), ``OffloadGroup`` (one copy to host) and ``OffloadPlan``
(entries, groups, schedule, prediction, the selection's notes), whose ``str`` is the plan table
(``plan_render``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from offload_pass.enums import CopyKind, Decision
from offload_pass.planning import plan_render
from offload_pass.planning.notes import SelectionNote, selection_text
from offload_pass.planning.reasons import Detail, Reason, sentence
from offload_pass.planning.step_model import StepPrediction
from offload_pass.planning.trial import Trial

__all__ = ["OffloadGroup", "OffloadPlan", "PlanEntry"]


@dataclasses.dataclass(frozen=True)
class PlanEntry:
    """One saved value: its decision, and why (``code`` with ``detail``,
    the values its sentence names; ``reason`` is that sentence)."""

    name: str
    op: str
    module: str
    role: Optional[str]
    shape: tuple
    dtype: str
    nbytes: int
    decision: Decision
    code: Reason
    storage: str
    detail: Detail = ()

    def __post_init__(self) -> None:
        if not isinstance(self.code, Reason):
            raise TypeError(f"PlanEntry {self.name}: code must be a planning.reasons.Reason, got {self.code!r}")

    @property
    def reason(self) -> str:
        """The reason in words (``reasons.sentence``)."""
        return sentence(self.code, self.detail)


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
    # The pinned host memory the plan was cut to (host_limit.HostLimit); a
    # re-plan of the graph keeps it rather than read the host again while
    # this plan's copies are pinned.
    host_limit: Optional[object] = None
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
    # mode="auto" / "budget": what the selection and the search passes
    # decided, and the figures why (``selection`` renders them).
    notes: tuple[SelectionNote, ...] = ()
    # mode="budget": the peak to reach, bytes (scheduling.budget_bytes).
    budget: Optional[int] = None
    # mode="auto": the slowdown allowed (OffloadConfig.max_overhead), which
    # the measured step is checked against.
    max_overhead: Optional[float] = None
    # mode="auto": the slowdown over the predicted step without offload the
    # selection could spend: max_overhead, or max_overhead of plain
    # Inductor's step where that was measured.
    overhead_allowed: Optional[float] = None
    # mode="budget" past what offload alone reaches: the activation_memory_budget
    # PyTorch's partitioner ran under for this plan (recompute.py),
    # every partition tried, as predicted (the first is offload alone), and
    # in a re-plan the earlier plans' trials of the levels it did not try again.
    recompute_level: Optional[float] = None
    # The saved tensors of this partition the first did not save, what the
    # backward recomputes from (recompute.newly_saved).
    saved_for_recompute: tuple[str, ...] = ()
    recompute_trials: tuple[Trial, ...] = ()
    recompute_skipped: tuple[Trial, ...] = ()
    # Set by the rewrite: (bytes, slots) of the host buffer the copies of one
    # call are laid out in (copies of symbolic size are allocated apart).
    host_pool: Optional[tuple[int, int]] = None
    # Copy groups whose decision a prediction may change (eligible, and past
    # keep_first_in_backward). 0: every plan of this graph copies nothing,
    # whatever the step simulator says, so a re-plan could only compile the
    # same graph again. None: not counted (a plan built elsewhere than
    # plan_saved_tensors), which forbids nothing.
    candidates: Optional[int] = None
    # The modules with an op in the forward graph (saved_set.traced_modules):
    # the step report tells a marked module that ran inside this graph and
    # saved nothing from one Dynamo ran outside the compiled graphs.
    modules: frozenset[str] = frozenset()

    @property
    def selection(self) -> Optional[str]:
        """The notes as the plan's selection line (``notes.selection_text``); None without notes."""
        return selection_text(self.notes)

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
        return [e for e in self.entries if e.code == Reason.NO_GAIN]

    @property
    def kept_bytes(self) -> int:
        return sum(e.nbytes for e in self.entries if e.decision == Decision.KEEP)

    def entry(self, name: str) -> PlanEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no saved tensor named {name!r}; saved: {[e.name for e in self.entries]}")

    def __str__(self) -> str:
        return plan_render.plan_text(self)
