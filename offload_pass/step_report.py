"""Step report: what one training step offloaded, over every graph it ran.

Takes: the plans a backend recorded and the calls of their forward graphs
(``StepTracker.forward_called``, from the backend's call wrapper). Gives:
``StepReport`` for the latest step: the graphs that ran in it with their
call counts, total bytes offloaded, and totals per module.

Graph breaks (a Hugging Face loss function, an MoE loop) split one step into
several compiled graphs, so ``backend.plans[-1]`` alone may be the loss graph
with nothing offloaded. A step starts with the first forward call after a
backward has run: each call hooks its first output that requires grad, and
the hook fires when the backward reaches it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Optional, Sequence

import torch
from torch.utils._pytree import tree_leaves

from .plan import OffloadPlan
from .units import format_bytes

__all__ = ["StepReport", "StepTracker"]


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

    @property
    def offloaded_bytes(self) -> int:
        """Bytes copied to host memory in the step (each copy once per call)."""
        return sum(plan.offloaded_bytes * calls for plan, calls in self.graphs)

    @property
    def offloaded_tensors(self) -> int:
        return sum(len(plan.offloaded) * calls for plan, calls in self.graphs)

    @property
    def kept_without_gain(self) -> int:
        return sum(len(plan.kept_without_gain) * calls for plan, calls in self.graphs)

    def by_module(self) -> list[ModuleTotal]:
        """Offloaded tensors and their bytes per module (qualified name from
        the marked model's root), largest first."""
        tensors: Counter = Counter()
        nbytes: Counter = Counter()
        for plan, calls in self.graphs:
            for entry in plan.entries:
                if entry.decision == "offload":
                    tensors[entry.module] += calls
                    nbytes[entry.module] += entry.nbytes * calls
        return sorted(
            (ModuleTotal(m, tensors[m], nbytes[m]) for m in tensors), key=lambda t: (-t.nbytes, t.module)
        )

    def __str__(self) -> str:
        lines = [
            f"step {self.step}: {len(self.graphs)} graphs, offloaded {self.offloaded_tensors} saved tensors "
            f"({format_bytes(self.offloaded_bytes)})"
        ]
        for plan, calls in self.graphs:
            times = f" x{calls}" if calls > 1 else ""
            lines.append(
                f"  {plan.graph_id}{times}: {len(plan.offloaded)} offloaded "
                f"({format_bytes(plan.offloaded_bytes)}), {len(plan.entries) - len(plan.offloaded)} kept"
            )
        totals = self.by_module()
        if totals:
            width = max(len(t.module or "-") for t in totals)
            lines.append("  per module:")
            for t in totals:
                lines.append(f"    {(t.module or '-').ljust(width)}  {t.tensors:4d} tensors  {format_bytes(t.nbytes)}")
        if self.kept_without_gain:
            lines.append(
                f"  kept {self.kept_without_gain} marked tensors that would not lower the predicted peak; "
                "make_backend(keep_if_no_gain=False) offloads them anyway"
            )
        return "\n".join(lines)


class StepTracker:
    """Counts forward calls per plan, step by step."""

    def __init__(self) -> None:
        self.step = 0
        self._calls: Counter = Counter()
        self._backward_ran = True  # the first call starts step 1

    def forward_called(self, plan_index: int, outputs: Any) -> None:
        if self._backward_ran:
            self.step += 1
            self._calls = Counter()
            self._backward_ran = False
        self._calls[plan_index] += 1
        for leaf in tree_leaves(outputs):
            if isinstance(leaf, torch.Tensor) and leaf.requires_grad:
                leaf.register_hook(self._on_backward)
                break

    def _on_backward(self, grad: torch.Tensor) -> None:
        self._backward_ran = True

    def report(self, plans: Sequence[OffloadPlan]) -> Optional[StepReport]:
        if not self._calls:
            return None
        return StepReport(self.step, tuple((plans[i], n) for i, n in sorted(self._calls.items())))
