"""offload_pass: activation offloading as a torch.compile pass.

Mark modules, regions or tensors; compile with ``offload_backend``; the saved
activations you marked go to host memory after their producer and come back
ahead of their first use in backward.

The stages, one module each: markers -> annotations -> saved_set / plan ->
rewrite -> runtime, wired by backend.
"""

from . import runtime as _runtime  # registers the offload_pass:: ops
from .backend import OffloadBackend, make_backend, offload_backend
from .config import OffloadConfig
from .graph_text import graph_diff, render_graph
from .grouped_mlp import GroupedMLP
from .markers import (
    clear_marks,
    keep_modules,
    mark_not_offload,
    mark_offload,
    offload_modules,
    offload_region,
)
from .plan import OffloadPlan, PlanEntry
from .step_report import StepReport
from .roles import register_saved_roles

__all__ = [
    "GroupedMLP",
    "OffloadBackend",
    "OffloadConfig",
    "OffloadPlan",
    "PlanEntry",
    "StepReport",
    "clear_marks",
    "graph_diff",
    "keep_modules",
    "make_backend",
    "mark_not_offload",
    "mark_offload",
    "offload_backend",
    "offload_modules",
    "offload_region",
    "register_saved_roles",
    "render_graph",
]

__version__ = "0.1.0"
