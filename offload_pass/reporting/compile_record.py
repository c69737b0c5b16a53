"""What the backend did for one forward/backward pair it compiled.

Takes: what the compile pipeline produced for one compile, and what the
feedback loop (``offload_pass/feedback``) learned of it afterwards. Gives: a
``CompileRecord``: the plan (the decisions, their schedule and the step
simulator's ``baseline`` / ``prediction``), the memory timelines before and
after the rewrite, the search passes' notes (``pipeline/notes.py``: codes
with their figures), the names of the passes that changed the graphs, in
order, the graph texts (``GraphTexts``) when the backend was asked to keep
them (``OffloadBackend(keep_graphs=True)``: the texts are as large as the
graphs and a long run compiles many, so they are not kept by default), and
on CUDA the feedback loop's facts: the calibration the plan was planned
under, why it was planned again, the prediction checked against measured
calls, and what runs in place of the plan. A plan holds only what was
decided and predicted; these facts come after it, so they live here.
``str(record)`` is the plan's text with the facts' lines under it
(``plan_render.record_text``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Protocol

from offload_pass.enums import ReplanReason
from offload_pass.planning import plan_render
from offload_pass.planning.plan import OffloadPlan
from offload_pass.planning.timeline import Timeline

__all__ = ["CompileRecord", "GraphTexts"]


class Described(Protocol):
    """A measurement check on the plan (feedback.check.PredictionCheck): the record prints its sentence."""

    def describe(self) -> str: ...


class PlannedUnder(Described, Protocol):
    """The calibration a plan was planned under (planning.calibration.Calibration):
    the record prints its sentence, and whether an earlier compile fitted it (``carried``)."""

    carried: bool


@dataclasses.dataclass(frozen=True)
class GraphTexts:
    """``reporting.graph_text.render_graph`` of both graphs, before and after
    the rewrite; ``graph_diff(texts.forward_before, texts.forward)`` shows
    what the pass changed."""

    forward_before: str
    backward_before: str
    forward: str
    backward: str


@dataclasses.dataclass(frozen=True)
class CompileRecord:
    plan: OffloadPlan
    timeline_before: Timeline
    timeline_after: Timeline
    graph_texts: Optional[GraphTexts] = None
    notes: tuple = ()  # pipeline.notes.SelectionNote of each search pass that changed the selection
    made_by: tuple[str, ...] = ()  # the passes that changed the graphs, in order
    # The calibration the plan was planned under (planning.calibration.Calibration;
    # None: planned from the estimates and measured kernels; ``carried``: the
    # scales an earlier compile of the same graph fitted).
    calibration: Optional[PlannedUnder] = None
    # Why the plan was planned again (with ``calibration``); None: a first plan.
    replan_reason: Optional[ReplanReason] = None
    # On CUDA: the step simulator's prediction against the median of measured
    # calls of this graph (feedback.check.PredictionCheck); None: not measured.
    measured: Optional[Described] = None
    # mode="auto" on CUDA: measured over max_overhead and not planned again,
    # what the graph runs instead and why; None: it runs this plan.
    fallback: Optional[str] = None

    @property
    def graphs(self) -> GraphTexts:
        """The graph texts; an error naming the switch when they were not kept."""
        if self.graph_texts is None:
            raise ValueError(
                f"offload_pass: the graph texts of {self.plan.graph_id} were not kept; compile with "
                "OffloadBackend(keep_graphs=True) or make_backend(keep_graphs=True) to keep them"
            )
        return self.graph_texts

    def __str__(self) -> str:
        return plan_render.record_text(self)
