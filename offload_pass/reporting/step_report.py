"""Step report: what one training step offloaded, over every graph it ran.

Takes: the plans a backend recorded and the calls of their forward graphs
(``StepTracker.forward_called``, from the backend's call wrapper). Gives:
``StepReport`` for the latest step: the graphs that ran in it with their
call counts, total bytes offloaded, and totals per module; under
mode="auto", the calls that ran plain Inductor's compile of a graph in
place of its plan (the backend measures the plan beside it) apart, with
nothing offloaded; its text quotes every byte figure in the unit of the
step's total. ``modules_without_offload`` says why a marked module moved
nothing: its saved tensors counted per reason (``kept_reasons``), every
reason listed, so the counts add up to the tensors it saved.

Graph breaks (a Hugging Face loss function, an MoE loop) split one step into
several compiled graphs, so ``backend.plans[-1]`` alone may be the loss graph
with nothing offloaded. A step starts with the first forward call after a
backward has run: each call hooks its first output that requires grad, and
the hook fires when the backward reaches it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Callable, Optional, Sequence

import torch
from torch.utils._pytree import tree_leaves

from offload_pass.enums import Decision
from offload_pass.planning.byte_unit import unit_for
from offload_pass.planning.plan import OffloadPlan
from offload_pass.planning.reasons import Reason

__all__ = ["StepReport", "StepTracker", "kept_reasons", "modules_without_offload"]


@dataclasses.dataclass(frozen=True)
class ModuleTotal:
    module: str
    tensors: int  # saved tensors offloaded, over every call in the step
    nbytes: int


@dataclasses.dataclass(frozen=True)
class StepReport:
    """The latest step: each graph that ran (its plan, how often)."""

    step: int  # 1 for the first step the backend saw
    graphs: tuple[tuple[OffloadPlan, int], ...]
    # mode="auto": each graph whose plain Inductor compile ran in place of
    # its plan (measured beside it, feedback.schedule.plain_calls), how often:
    # those calls offloaded nothing.
    plain_inductor: tuple[tuple[OffloadPlan, int], ...] = ()

    @property
    def _copied(self) -> tuple[tuple[OffloadPlan, int], ...]:
        """The graphs whose copies ran: a plan recorded with the rewrite
        disabled ("offload" in disabled_passes) copied nothing."""
        return tuple((plan, calls) for plan, calls in self.graphs if plan.rewritten)

    @property
    def offloaded_bytes(self) -> int:
        """Bytes copied to host memory in the step (each copy once per call)."""
        return sum(plan.offloaded_bytes * calls for plan, calls in self._copied)

    @property
    def offloaded_tensors(self) -> int:
        return sum(len(plan.offloaded) * calls for plan, calls in self._copied)

    @property
    def kept_without_gain(self) -> int:
        return sum(len(plan.kept_without_gain) * calls for plan, calls in self.graphs)

    def by_module(self) -> list[ModuleTotal]:
        """Offloaded tensors and their bytes per module (qualified name from
        the marked model's root), largest first."""
        tensors: Counter = Counter()
        nbytes: Counter = Counter()
        for plan, calls in self._copied:
            for entry in plan.entries:
                if entry.decision == Decision.OFFLOAD:
                    tensors[entry.module] += calls
                    nbytes[entry.module] += entry.nbytes * calls
        return sorted(
            (ModuleTotal(m, tensors[m], nbytes[m]) for m in tensors), key=lambda t: (-t.nbytes, t.module)
        )

    def __str__(self) -> str:
        """The step, its graphs and its totals per module, every byte figure
        in the unit of the largest (the step's total)."""
        unit = unit_for(self.offloaded_bytes)
        ran = len({plan.graph_id for plan, _ in (*self.graphs, *self.plain_inductor)})
        lines = [
            f"step {self.step}: {ran} graphs, offloaded {self.offloaded_tensors} saved tensors "
            f"({unit(self.offloaded_bytes)})"
        ]
        for plan, calls in self.graphs:
            times = f" x{calls}" if calls > 1 else ""
            if not plan.rewritten:
                lines.append(f"  {plan.graph_id}{times}: rewrite disabled, nothing copied "
                             f"({len(plan.offloaded)} planned for offload)")
                continue
            lines.append(
                f"  {plan.graph_id}{times}: {len(plan.offloaded)} offloaded "
                f"({unit(plan.offloaded_bytes)}), {len(plan.entries) - len(plan.offloaded)} kept"
            )
        for plan, calls in self.plain_inductor:
            times = f" x{calls}" if calls > 1 else ""
            lines.append(
                f"  {plan.graph_id}{times}: ran plain Inductor's compile of its graph, nothing offloaded "
                "(mode=auto measures the plan beside it)"
            )
        totals = self.by_module()
        if totals:
            width = max(len(t.module or "-") for t in totals)
            lines.append("  per module:")
            for t in totals:
                lines.append(f"    {(t.module or '-').ljust(width)}  {t.tensors:4d} tensors  {unit(t.nbytes)}")
        if self.kept_without_gain:
            lines.append(
                f"  kept {self.kept_without_gain} marked tensors that would not lower the predicted peak; "
                "make_backend(keep_if_no_gain=False) offloads them anyway"
            )
        return "\n".join(lines)


# Plan reason codes for a saved graph input (plan.eligibility).
_FRAME_INPUT_REASONS = (Reason.GRAPH_INPUT, Reason.INPUT_VIEW)


def _under(module: str, name: str) -> bool:
    """Whether ``module`` is the marked module ``name`` or inside it ("": the root, every module)."""
    return not name or module == name or module.startswith(name + ".")


def _kept_reason(entry: Any) -> str:
    """An entry's reason as the warning counts it: by code, not split by
    the figures of one tensor (its bytes, the member it shares storage with)."""
    if entry.code == Reason.BELOW_MIN_BYTES:
        return f"below min_bytes ({dict(entry.detail)['min_bytes']}: lower it with OffloadConfig(min_bytes=...))"
    if entry.code == Reason.SHARES_STORAGE:
        return "share storage with a tensor that may not be offloaded"
    return entry.reason


def kept_reasons(entries: Sequence[Any]) -> str:
    """How many of ``entries`` were kept for each reason, every reason named
    (most first), so the counts add up to ``len(entries)``."""
    counts = Counter(_kept_reason(e) for e in entries)
    return "; ".join(f"{n} {reason}" for reason, n in sorted(counts.items(), key=lambda c: (-c[1], c[0])))


def modules_without_offload(report: StepReport, marked: Sequence[str]) -> list[tuple[str, str]]:
    """(module, why) for each module marked for offload of which nothing was
    offloaded in the step. A pure function over the report's plans."""
    found = []
    for name in marked:
        mine = [
            e for plan, _ in report.graphs for e in plan.entries
            if _under(e.module, name) or f"module {name}" in e.reason
        ]
        if any(e.decision != Decision.KEEP for e in mine):  # offloaded or recomputed
            continue
        if mine and all(e.code in _FRAME_INPUT_REASONS for e in mine):
            why = (
                f"its only saved tensors ({len(mine)}) are inputs of graphs Dynamo compiled on their "
                "own: graph breaks inside it (such as a data-dependent loop) keep what it computes "
                "out of the compiled graphs (TORCH_LOGS=graph_breaks lists them)"
            )
        elif mine:
            why = f"its {len(mine)} saved tensors were kept: " + kept_reasons(mine)
        else:
            ran_in = sorted({plan.graph_id for plan, _ in report.graphs if any(_under(m, name) for m in plan.modules)})
            why = (
                f"it ran inside the compiled {', '.join(ran_in)}, and the partitioner saved nothing it "
                "produced (what its backward reads, if anything, other modules produced)"
            ) if ran_in else (
                "no graph of the step saved a tensor it produced, and none ran its ops: Dynamo ran its "
                "forward outside the compiled graphs (graph breaks inside it, such as a data-dependent "
                "loop; TORCH_LOGS=graph_breaks lists them)"
            )
        found.append((name, why))
    return found


class StepTracker:
    """Counts forward calls per plan, step by step. Holds plain data only
    (the backend, which holds it, is part of Inductor's cache key)."""

    def __init__(self) -> None:
        self.step = 0
        self._calls: Counter = Counter()
        self._plain_calls: Counter = Counter()  # plan index -> calls that ran plain Inductor's compile instead
        self._backward_ran = True  # the first call starts step 1

    def forward_called(
        self,
        plan_index: int,
        outputs: Any,
        plans: Sequence[OffloadPlan] = (),
        on_first_backward: Optional[Callable[[StepReport], None]] = None,
        plain: bool = False,
    ) -> None:
        """``on_first_backward`` gets the first step's report when its
        backward starts (its forwards have all run by then). ``plain``: the
        call ran plain Inductor's compile of the graph in place of the plan
        ``plan_index`` (mode="auto" measuring the plan beside it)."""
        if self._backward_ran:
            self.step += 1
            self._calls, self._plain_calls = Counter(), Counter()
            self._backward_ran = False
        (self._plain_calls if plain else self._calls)[plan_index] += 1

        def backward_started(grad: torch.Tensor) -> None:
            if not self._backward_ran and self.step == 1 and on_first_backward is not None:
                report = self.report(plans)
                if report is not None:
                    on_first_backward(report)
            self._backward_ran = True

        for leaf in tree_leaves(outputs):
            if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
                leaf.register_hook(backward_started)
                break

    def ran_alone(self, plan_index: int) -> bool:
        """The last step is complete and ran only this graph, once (its
        plan, or plain Inductor's compile of it): a peak measured over one
        call of it is this graph's own."""
        one = Counter({plan_index: 1})
        return self._backward_ran and (self._calls, self._plain_calls) in ((one, Counter()), (Counter(), one))

    def report(self, plans: Sequence[OffloadPlan]) -> Optional[StepReport]:
        if not self._calls and not self._plain_calls:
            return None
        return StepReport(
            self.step,
            tuple((plans[i], n) for i, n in sorted(self._calls.items())),
            tuple((plans[i], n) for i, n in sorted(self._plain_calls.items())),
        )
