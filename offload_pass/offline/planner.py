"""``plan_offline``: a model's plans for a GPU, traced on the meta device.

Takes: a model built on the meta device (no weight allocated), its example
inputs, an ``OffloadConfig``, the name of a device profile
(``planning/profiles.py``) and optionally the loss. Gives an
``OfflinePlans``: per graph the ``OffloadPlan`` the compile pipeline makes,
its predictions priced with that profile (copies asynchronous, nothing
measured), the seconds planning took and the seconds PyTorch's partitioner
alone takes on the same joint graph.

How: ``torch.compile`` with a backend of its own (``torch.compile`` with
``OffloadBackend`` is untouched) that routes attention to a fused kernel
(``meta_trace.route_attention``) and runs Inductor's ``compile_fx`` as that
backend does (its decompositions, joint-graph passes, the marks' pre-pass)
with the pipeline as its partitioner and a stub for the kernel compile: the
forward runs once, on meta tensors; no kernel is compiled, no backward runs.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Sequence, Union

import torch
import torch.fx as fx
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from offload_pass.annotation.annotations import TensorMarkPass, annotate_requests
from offload_pass.backend import _inductor_patches
from offload_pass.config import OffloadConfig
from offload_pass.marking.mark_stack import active_marks
from offload_pass.marking.naming import frame_root_name
from offload_pass.offline.meta_trace import (
    check_meta_model, meta_tracing, route_attention, stub_compile, to_meta,
)
from offload_pass.offline.plans import GraphPlan, OfflinePlans
from offload_pass.pipeline.passes import PassContext
from offload_pass.pipeline.search import run_pipeline
from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.profiles import device_memory, named_profile
from offload_pass.reporting.compile_record import GraphTexts
from offload_pass.reporting.graph_text import render_graph

__all__ = ["PYTORCH_BUDGET", "plan_offline"]

# The activation_memory_budget PyTorch's partitioner is timed under, for
# comparison: a budget below 1 runs its knapsack, as mode="budget"'s levels do.
PYTORCH_BUDGET = 0.5


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    """Wall and CPU seconds since ``start`` (``_clocks``)."""
    now = _clocks()
    return now[0] - start[0], now[1] - start[1]


class _Planner(CustomPartitionerFn):
    """Inductor's partitioner hook: the pipeline under ``profile``, each
    graph's ``GraphPlan`` appended to ``graphs``."""

    def __init__(self, config: OffloadConfig, profile: DeviceProfile, keep_graphs: bool, frame_root, marks) -> None:
        self.config, self.profile, self.keep_graphs = config, profile, keep_graphs
        self.frame_root, self.marks = frame_root, marks
        self.graphs: list[GraphPlan] = []

    def __call__(self, joint: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any):
        annotate_requests(joint.graph, self.marks[-1] if self.marks else None)
        start = _clocks()
        with torch._functorch.config.patch(activation_memory_budget=PYTORCH_BUDGET):
            min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
        pytorch_s = _since(start)
        prefix = self.frame_root if self.frame_root is not None else (
            (self.marks[-1].qualname or "") if self.marks else ""
        )
        ctx = PassContext(
            self.config, joint, joint_inputs, kwargs, f"graph {len(self.graphs)}", prefix, None, self.keep_graphs,
            profile=self.profile,
        )
        start = _clocks()
        state = run_pipeline(ctx)
        planning_s = _since(start)
        texts = None if state.texts_before is None else GraphTexts(
            *state.texts_before, render_graph(state.fw_gm), render_graph(state.bw_gm)
        )
        self.graphs.append(GraphPlan(
            state.plan, planning_s[0], pytorch_s[0], PYTORCH_BUDGET, len(joint.graph.nodes), texts,
            planning_s[1], pytorch_s[1],
        ))
        return state.fw_gm, state.bw_gm

    def uuid(self) -> object:
        return None  # never cached: Inductor's caches are off for these compiles


def _backend(planner_of: Callable[[fx.GraphModule], _Planner]) -> Callable:
    """A Dynamo backend: attention routed, Inductor's pipeline with the planner, no kernel compiled."""
    from torch._inductor.compile_fx import compile_fx

    def backend(gm: fx.GraphModule, example_inputs: Sequence[object]) -> Callable:
        route_attention(gm)
        patches = _inductor_patches(None, None)
        patches.update({
            "custom_partitioner_fn": planner_of(gm),
            "joint_custom_pre_pass": TensorMarkPass(),
            "fx_graph_cache": False,
        })
        with torch._functorch.config.patch(enable_autograd_cache=False), meta_tracing():
            return compile_fx(gm, example_inputs, inner_compile=stub_compile, config_patches=patches)

    backend._is_offload_backend = True  # type: ignore[attr-defined]  (marks apply: marking.backend_check)
    return backend


def plan_offline(
    model: torch.nn.Module,
    args: Union[tuple, list] = (),
    kwargs: Optional[dict] = None,
    config: Optional[OffloadConfig] = None,
    device_profile: str = "h200",
    loss: Optional[Callable[[Any], torch.Tensor]] = None,
    keep_graphs: bool = False,
) -> OfflinePlans:
    """The plans of ``model(*args, **kwargs)``'s forward and backward for
    the device ``device_profile`` names (``planning.profiles.named_profile``),
    without allocating weights or activations: the model's parameters and
    buffers must be on the meta device (input tensors elsewhere are moved
    there). ``loss``: a function of the model's output giving the scalar
    the backward starts from, traced with the model (its ops in the joint
    graph); None: each output the model returns gets its gradient from
    outside, as ``torch.compile(model)`` alone. ``keep_graphs``: keep the
    graph texts before and after the rewrite in each ``GraphPlan``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"plan_offline: model must be a torch.nn.Module, got {type(model).__name__}")
    config = OffloadConfig() if config is None else config
    if not isinstance(config, OffloadConfig):
        raise TypeError(f"plan_offline: config must be an OffloadConfig, got {type(config).__name__}")
    profile = named_profile(device_profile)
    check_meta_model(model)
    args = tuple(to_meta(args if isinstance(args, (tuple, list)) else (args,)))
    kwargs = to_meta(dict(kwargs or {}))
    planners: list[_Planner] = []

    def planner_of(gm: fx.GraphModule) -> _Planner:
        made = _Planner(config, profile, keep_graphs, frame_root_name(gm), active_marks())
        made.graphs = planners[0].graphs if planners else made.graphs  # one list: graph ids count on
        planners.append(made)
        return made

    fn = model if loss is None else (lambda *a, **k: loss(model(*a, **k)))
    start = time.perf_counter()
    torch.compile(fn, backend=_backend(planner_of), dynamic=False)(*args, **kwargs)
    trace_s = time.perf_counter() - start
    graphs = tuple(planners[0].graphs) if planners else ()
    if not graphs:
        raise ValueError(
            "plan_offline: no graph with a backward was traced (no parameter or input requires grad?), so "
            "there is nothing to plan"
        )
    return OfflinePlans(graphs, device_profile, profile, device_memory(device_profile), trace_s)
