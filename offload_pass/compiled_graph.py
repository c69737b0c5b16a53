"""The compiled graph as Dynamo calls it.

Takes: Inductor's compiled function of one forward/backward pair, the marks
it was compiled under, the index of its record and a ``GraphHost`` (what it
reports to the backend). Gives: ``CompiledGraph``, the callable the backend
hands to Dynamo. Each call checks that the marks in force are those the
graph was compiled under (``marking/mark_keeping.py``: Dynamo cannot always
tell them apart) and counts the call in the backend's step report
(``reporting/step_report.py``). The feedback loop (``offload_pass/feedback``)
extends it to measure calls and plan again; without it, a call runs the
plan the pipeline made, nothing else.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, NamedTuple, Optional, Sequence

from offload_pass.marking.mark import Mark
from offload_pass.marking.mark_keeping import active_mark_key, active_marks, mark_key
from offload_pass.reporting.step_report import StepReport, StepTracker

__all__ = ["Compiled", "CompiledGraph", "GraphHost"]


class Compiled(NamedTuple):
    """One compile's result: Inductor's compiled function, the index of its
    record (None: no backward graph, nothing planned) and the step simulator
    over its graphs (``simulate(calibration)``; None: not kept)."""

    fn: Callable
    plan_index: Optional[int]
    simulate: Optional[Callable]


@dataclasses.dataclass(frozen=True)
class GraphHost:
    """What a compiled graph reads from and reports to its backend: the
    plans of its records, the step tracker, the warning said once for
    marked modules nothing was offloaded of, and for the feedback loop the
    records themselves (``reporting/compile_record.py``) and
    ``record_facts(index, **facts)``, which sets what it learned of record
    ``index`` (``measured``, ``replan_reason``, ``fallback``)."""

    plans: Callable[[], list]
    steps: StepTracker
    warn_marks: Callable[[StepReport], None]
    records: Callable[[], list]
    record_facts: Callable[..., None]


def under(marks: Sequence[Mark]) -> str:
    return f"inside {marks[-1].source}" if marks else "outside any mark"


class CompiledGraph:
    """What Dynamo calls for one compiled graph. ``plan_index``: the graph's
    record in the backend's records (None: no backward graph, nothing planned)."""

    def __init__(
        self, host: GraphHost, compiled: Callable, active: Sequence[Mark], plan_index: Optional[int]
    ) -> None:
        self.host = host
        self.compiled = compiled
        self.plan_index = plan_index
        self.graph_id = "a graph" if plan_index is None else f"graph {plan_index}"
        self.calls = 0
        self._key = mark_key(active)
        self._compiled_under = under(active)
        self._warned = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check_marks()
        self.calls += 1
        outputs, plain = self._run(args, kwargs)
        if self.plan_index is not None:
            self.host.steps.forward_called(self.plan_index, outputs, self.host.plans(), self.host.warn_marks, plain)
        return outputs

    def _run(self, args: tuple, kwargs: dict) -> tuple[Any, bool]:
        """Run the call: its outputs, and whether plain Inductor's graph ran it (here never)."""
        return self.compiled(*args, **kwargs), False

    def _check_marks(self) -> None:
        """A frame compiled on its own after a graph break can be reused under
        marks other than those it was compiled for, where Dynamo cannot tell
        them apart (see marking/mark_keeping.py): say so, once, when it
        happens. The gradients are right either way; only what is offloaded
        differs from the marks."""
        if self._warned or active_mark_key() == self._key:
            return
        self._warned = True
        warnings.warn(
            f"offload_pass: {self.graph_id} was compiled after a graph break {self._compiled_under} and "
            f"now runs {under(active_marks())}: "
            "Dynamo cannot keep compiled frames apart by mark here (a function called "
            "from a marked module and from an unmarked one, with a graph break inside), "
            "so it offloads what its plan says, not what the marks here say. Mark every "
            "module that runs this code alike, or move the graph break out of it "
            "(gradients are unaffected).",
            RuntimeWarning,
            stacklevel=3,
        )
