"""The one interface the feedback loop plans again through.

Takes: nothing. Gives: ``Pipeline``, what the backend hands the loop (its
compile pipeline as one callable, and how plain Inductor's graph is
recorded); ``Recompile``, what a measured graph holds to plan once more;
and the copies of Dynamo's graph a re-plan and plain Inductor's compile
start from (``pristine_copy``, ``graph_copy``, ``compile_plain``).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx as fx

from offload_pass.compiled_graph import Compiled
from offload_pass.feedback.check import PredictionCheck
from offload_pass.planning.calibration import Calibration

__all__ = ["Pipeline", "Recompile", "compile_plain", "graph_copy", "pristine_copy", "static_shapes", "user_patches"]

@dataclasses.dataclass(frozen=True)
class Pipeline:
    """What the backend hands the feedback loop. ``compile(gm, inputs,
    calibration, keep_simulator, prior, floor)`` runs the compile pipeline
    (``prior``: the plan a re-plan replaces; ``floor``: mode="auto"'s
    measured set of copies); ``record_plain(plan_index, reason, check)``
    records plain Inductor's graph in place of a plan, returning its index."""

    compile: Callable[..., Compiled]
    record_plain: Callable[[int, str, PredictionCheck], int]


@dataclasses.dataclass(frozen=True)
class Recompile:
    """How a measured graph is planned once more. ``compile(calibration,
    inputs, prior)``: None, measure only (``why_not`` says why);
    ``simulate``: the step simulator over the graphs measured;
    ``compile_plain(inputs)``: mode="auto", plain Inductor's compile of the
    same graph (None: not measured); ``key``: ``memory.graph_key``."""

    device: torch.device
    simulate: Optional[Callable[[Calibration], Any]]
    compile: Optional[Callable[[Calibration, list, Any], Compiled]]
    record_plain: Callable[[int, str, PredictionCheck], int]
    why_not: str = ""
    key: str = ""
    compile_plain: Optional[Callable[[list], Callable]] = None
    store: Any = None  # disk.CalibrationStore where fitted calibrations are kept for later runs (None: none)


def graph_copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of Dynamo's graph that Inductor can compile again. Dynamo's
    sources of the inputs, which AOTAutograd reads, are node attributes that
    a deep copy leaves behind."""
    copied = copy.deepcopy(gm)
    for old, new in zip(gm.graph.find_nodes(op="placeholder"), copied.graph.find_nodes(op="placeholder")):
        if hasattr(old, "_dynamo_source"):
            new._dynamo_source = old._dynamo_source  # type: ignore[attr-defined]
    return copied


def static_shapes(gm: fx.GraphModule) -> bool:
    """No input of symbolic size: a graph compiled again from one call's
    inputs serves every call Dynamo sends it."""
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.SymInt):
            return False
        if isinstance(value, torch.Tensor) and any(
            isinstance(d, torch.SymInt) for d in (*value.shape, *value.stride(), value.storage_offset())
        ):
            return False
    return True


def pristine_copy(gm: fx.GraphModule) -> tuple[Optional[fx.GraphModule], str]:
    """A copy of Dynamo's graph for a re-plan to compile, or None and why there is none."""
    if not static_shapes(gm):
        return None, "its inputs have dynamic sizes (a re-plan would compile it for one size)"
    if any(True for _ in gm.parameters()) or any(True for _ in gm.buffers()) or gm.graph.find_nodes(op="get_attr"):
        # A copy would hold copies of them: the re-planned graph would train those.
        return None, "it holds tensors of its own (parameters, buffers or constants), which a copy would duplicate"
    try:
        return graph_copy(gm), ""
    except Exception as error:  # a graph deepcopy cannot copy: measured, never planned again
        return None, f"its graph could not be copied for a second compile ({type(error).__name__}: {error})"


def user_patches(mode: Optional[str], options: Optional[dict[str, Any]]) -> dict[str, Any]:
    """Inductor's configuration as the user's ``torch.compile`` asked for it."""
    from torch._inductor import list_mode_options

    return {**(list_mode_options(mode) if mode else {}), **(options or {})}


def compile_plain(pristine: fx.GraphModule, patches: dict[str, Any], inputs: list) -> Callable:
    """Plain Inductor's compile of Dynamo's graph (``patches``: the user's;
    no pass of ours): what mode="auto" measures a plan's step against."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(graph_copy(pristine), inputs, config_patches=dict(patches))
