"""What planning offline gives: each graph's plan, with the time it took.

Takes: the pipeline's result per graph (``offline.planner``). Gives
``GraphPlan`` (one forward/backward pair: its ``OffloadPlan`` with its
predictions, the seconds the pipeline took over it, and the seconds
PyTorch's min-cut partitioner alone took on the same joint graph) and
``OfflinePlans`` (every graph of the model, the device profile planned for,
the time to trace; ``str`` is the plan tables and a summary line each).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.offload_plan import OffloadPlan
from offload_pass.reporting.compile_record import GraphTexts
from offload_pass.units import format_bytes

__all__ = ["GraphPlan", "OfflinePlans"]


@dataclasses.dataclass(frozen=True)
class GraphPlan:
    """One graph's plan. ``planning_s``: the pipeline (partitions, plans,
    predictions, rewrites); ``pytorch_partition_s``: PyTorch's
    ``min_cut_rematerialization_partition`` once, under
    ``pytorch_budget`` (its ``activation_memory_budget``), on the same
    joint graph; ``joint_nodes``: that graph's size; ``*_cpu_s``: the
    same two in this process's CPU time (what a shared machine's wall clock
    inflates)."""

    plan: OffloadPlan
    planning_s: float
    pytorch_partition_s: float
    pytorch_budget: float
    joint_nodes: int
    graph_texts: Optional[GraphTexts] = None
    planning_cpu_s: float = 0.0
    pytorch_partition_cpu_s: float = 0.0

    def summary(self) -> str:
        """One line: the predicted peaks and step, and the two times."""
        plan = self.plan
        peaks = ""
        if plan.baseline is not None and plan.prediction is not None:
            peaks = (
                f"predicted peak {format_bytes(plan.baseline.peak)} -> {format_bytes(plan.prediction.peak)}, "
                f"step {plan.baseline.step_ms:.1f} -> {plan.prediction.step_ms:.1f} ms; "
            )
        return (
            f"{plan.graph_id}: {peaks}{self.joint_nodes} joint nodes planned in {self.planning_s:.2f} s "
            f"(PyTorch's partitioner at activation_memory_budget={self.pytorch_budget:g}: "
            f"{self.pytorch_partition_s:.2f} s)"
        )


@dataclasses.dataclass(frozen=True)
class OfflinePlans:
    """Every graph of the model planned for ``device_profile`` (its name),
    ``profile`` its figures, ``device_memory`` its bytes (None: unknown);
    ``trace_s``: the whole call (Dynamo, AOTAutograd, the planning)."""

    graphs: tuple[GraphPlan, ...]
    device_profile: str
    profile: DeviceProfile
    device_memory: Optional[int]
    trace_s: float

    @property
    def plans(self) -> list[OffloadPlan]:
        return [g.plan for g in self.graphs]

    @property
    def planning_s(self) -> float:
        return sum(g.planning_s for g in self.graphs)

    @property
    def pytorch_partition_s(self) -> float:
        return sum(g.pytorch_partition_s for g in self.graphs)

    def __str__(self) -> str:
        memory = "" if self.device_memory is None else f", {format_bytes(self.device_memory)}"
        lines = [f"planned offline for {self.device_profile} ({self.profile.source}{memory})", ""]
        for graph in self.graphs:
            lines += [str(graph.plan), "", graph.summary(), ""]
        lines.append(
            f"{len(self.graphs)} graph(s): planning {self.planning_s:.2f} s, PyTorch's partitioner "
            f"{self.pytorch_partition_s:.2f} s, traced and planned in {self.trace_s:.2f} s"
        )
        return "\n".join(lines)
