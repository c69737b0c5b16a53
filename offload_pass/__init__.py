"""offload_pass: activation offloading as a torch.compile pass.

Mark modules, regions or tensors; compile with ``offload_backend``; the saved
activations you marked go to host memory after their producer and come back
ahead of their first use in backward.

The stages, one folder each, in the order data flows: marking ->
annotation -> planning -> rewriting -> runtime. ``pipeline/`` runs them at
compile time as named passes, wired into torch.compile by backend.py;
``feedback/`` measures the compiled graphs on the device and plans them
again; reporting renders what they did; examples (GroupedMLP, reference
models, the demo, explain) use the library and are not part of it.
"""

from offload_pass import runtime as _runtime  # registers the offload_pass:: ops
from offload_pass.backend import OffloadBackend, make_backend, offload_backend
from offload_pass.config import OffloadConfig
from offload_pass.reporting.graph_text import graph_diff, render_graph
from offload_pass.marking.markers import (
    clear_marks,
    keep_modules,
    mark_not_offload,
    mark_offload,
    offload_modules,
    offload_region,
)
from offload_pass.planning.plan import OffloadPlan, PlanEntry
from offload_pass.reporting.step_report import StepReport
from offload_pass.marking.roles import register_saved_roles
from offload_pass.offline import OfflinePlans, plan_offline
from offload_pass.planning.shared_links import SharedBandwidth, measure_shared_bandwidth
from offload_pass.planning.workspace import register_workspace

__all__ = [
    "OffloadBackend",
    "OffloadConfig",
    "OfflinePlans",
    "OffloadPlan",
    "PlanEntry",
    "SharedBandwidth",
    "StepReport",
    "clear_marks",
    "graph_diff",
    "keep_modules",
    "make_backend",
    "mark_not_offload",
    "mark_offload",
    "measure_shared_bandwidth",
    "offload_backend",
    "offload_modules",
    "offload_region",
    "plan_offline",
    "register_saved_roles",
    "register_workspace",
    "render_graph",
]

__version__ = "0.1.0"
