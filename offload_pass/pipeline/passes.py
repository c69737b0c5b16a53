"""The compile pipeline's passes over one partition.

Takes: the joint graph AOTAutograd hands the partitioner and a
``PlanRequest`` (which partition and selection to make). Gives:
``ATTEMPT_PASSES``, the ordered named passes that turn it into a planned,
rewritten forward/backward pair (a ``PassState``), run by
``runner.run_passes`` (re-exported here with ``Pass``). Every pass has
one signature: ``(state: PassState, ctx: PassContext) -> PassState``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Optional, Sequence, Union

import torch
import torch.fx as fx

from offload_pass.annotation.mlp_roles import mlp_roles
from offload_pass.config import OffloadConfig
from offload_pass.pipeline.joint_cse import partition_joint
from offload_pass.pipeline.runner import Pass, run_passes
from offload_pass.enums import Mode, PassName
from offload_pass.planning.blocks import BlockCut, cut_tags, find_blocks
from offload_pass.planning.calibration import Calibration, overhead_allowed
from offload_pass.planning.host_limit import HostLimit, resolve_host_limit
from offload_pass.planning.cost_model import DeviceProfile, device_profile
from offload_pass.planning.lifetimes import copy_lifetimes
from offload_pass.planning.plan import OffloadPlan, plan_saved_tensors
from offload_pass.planning.saved_set import check_requested_roles, collect_saved_tensors, traced_modules
from offload_pass.planning.scheduling import Schedule, budget_bytes, device_of, schedule_copies
from offload_pass.planning.step_model import StepPrediction, node_times, predict_step
from offload_pass.planning.timeline import Timeline, simulate_step
from offload_pass.reporting.graph_text import render_graph
from offload_pass.rewriting.invariants import check_rewrite
from offload_pass.rewriting.rewrite import rewrite_graphs
from offload_pass.views import retrace_saved_views

__all__ = [
    "ATTEMPT_PASSES", "Pass", "PassContext", "PassState", "PlanRequest", "run_attempt", "run_passes", "simulate",
    "with_host_limit",
]

log = logging.getLogger("offload_pass")


@dataclasses.dataclass(frozen=True)
class PlanRequest:
    """Which partition and selection one run of the passes makes: PyTorch's
    ``activation_memory_budget`` or a ``BlockCut`` (``level``; None: as configured; a level's
    partition is measured from the first partition's step), the first
    ``max_copies`` copies the selection chose, the slowdown it chooses
    within (``select_within``; None: the one allowed), or exactly the copies
    of ``forced`` storages. ``beat_ms``: the step of a partition the search
    already found within the budget; a partition whose own step without
    offload stands above it is not planned (offload only adds to a step)."""

    level: Optional[Union[float, BlockCut]] = None
    max_copies: Optional[int] = None
    select_within: Optional[float] = None
    forced: Optional[frozenset[str]] = None
    beat_ms: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class PassContext:
    """What every pass reads and none changes."""

    config: OffloadConfig
    joint: fx.GraphModule
    joint_inputs: Sequence[object]
    kwargs: dict
    graph_id: str
    prefix: str  # the qualified name of the module this graph's frame runs
    calibration: Optional[Calibration]
    keep_graphs: bool
    request: PlanRequest = PlanRequest()
    reference: Optional[StepPrediction] = None  # the first partition's predicted step, where this is not it
    seen: Optional[set] = None  # the saved sets planned already (a partition saving one again stops)
    prior: Optional[OffloadPlan] = None  # a re-plan's: the plan it replaces
    floor: Any = None  # mode="auto": the set of copies measured within max_overhead (feedback.memory.MeasuredSet)
    # Plan as if on a device with this profile (planning/profiles.py), its
    # copies asynchronous, without measuring anything: a graph traced on the
    # CPU or the meta device planned for a GPU it does not run on.
    profile: Optional[DeviceProfile] = None
    # The pinned host bytes a plan may hold (resolved once per compile:
    # ``with_host_limit``).
    host_limit: Optional[HostLimit] = None


@dataclasses.dataclass
class PassState:
    """What the passes made so far of one partition (``plan`` and ``saved``
    are what the search passes read of it)."""

    fw_gm: Optional[fx.GraphModule] = None
    bw_gm: Optional[fx.GraphModule] = None
    saved: list = dataclasses.field(default_factory=list)
    plan: Optional[OffloadPlan] = None
    modules: frozenset = frozenset()
    texts_before: Optional[tuple[str, str]] = None
    count_cpu: bool = False
    timeline_before: Optional[Timeline] = None
    # The uncalibrated node times and device profile, and the calibrated ones the predictions use.
    measured: Any = None
    raw_profile: Any = None
    times: Any = None
    profile: Any = None
    baseline: Optional[StepPrediction] = None
    budget: Optional[int] = None
    allowed: Optional[float] = None
    lifetimes: Optional[dict] = None
    schedule: Optional[Schedule] = None
    timeline_after: Optional[Timeline] = None
    recompute_tried: bool = False  # mode="budget": the recompute search ran
    floor: Optional[int] = None  # mode="budget": the lowest predicted peak of every partition the search tried
    stopped: bool = False  # a pass ended the run (a saved set planned already, or ``slower_than``)
    slower_than: Optional[float] = None  # stopped: its own step stands above the request's ``beat_ms``
    changed_by: tuple[str, ...] = ()  # the passes that changed the graphs, in order
    notes: tuple = ()  # the search passes' SelectionNotes

    @property
    def simulation(self) -> Optional[tuple]:
        """What the step simulator needs besides the graphs (None without predictions)."""
        return None if self.measured is None else (self.timeline_after, self.measured, self.raw_profile)


def partition(state: PassState, ctx: PassContext) -> PassState:
    """PyTorch's min-cut partitioner, under the request's ``activation_memory_budget``
    or with the request's ``BlockCut`` tagged for recompute (``blocks.cut_tags``;
    the nodes not tagged under its ``rest`` budget)."""
    level = ctx.request.level
    cut = level if isinstance(level, BlockCut) else None
    budget = cut.rest if cut is not None else level
    patch = {} if budget is None else {"activation_memory_budget": budget}
    with contextlib.ExitStack() as stack, torch._functorch.config.patch(**patch):
        if cut is not None:
            tagged = stack.enter_context(cut_tags(ctx.joint, find_blocks(ctx.joint.graph), cut))
            log.debug("offload_pass: %s %s: %d nodes tagged for recompute", ctx.graph_id, cut, tagged)
        fw_gm, bw_gm = partition_joint(ctx.joint, ctx.joint_inputs, **ctx.kwargs)
    return dataclasses.replace(state, fw_gm=fw_gm, bw_gm=bw_gm)


def saved_set(state: PassState, ctx: PassContext) -> PassState:
    """Views re-traced, requested roles checked, the saved tensors collected;
    stops where this saved set was planned already (``ctx.seen``)."""
    fw_gm, bw_gm = state.fw_gm, state.bw_gm
    changed = retrace_saved_views(fw_gm, bw_gm)
    if changed:
        log.debug("offload_pass: %s views re-traced from their storage: %s", ctx.graph_id, ", ".join(changed))
    mlp = mlp_roles(fw_gm.graph)
    check_requested_roles(fw_gm.graph, mlp)
    static = ctx.kwargs.get("static_lifetime_input_indices") or ()
    saved = collect_saved_tensors(fw_gm, bw_gm, static, module_prefix=ctx.prefix, mlp=mlp)
    if ctx.seen is not None:
        key = frozenset(t.name for t in saved)
        if key in ctx.seen:
            return dataclasses.replace(state, saved=saved, stopped=True)
        ctx.seen.add(key)
    return dataclasses.replace(state, saved=saved)


def plan(state: PassState, ctx: PassContext) -> PassState:
    """Per saved tensor, keep or offload and why; the copy groups."""
    made = plan_saved_tensors(state.saved, ctx.config, ctx.graph_id)
    modules = traced_modules(state.fw_gm, ctx.prefix)
    texts = (render_graph(state.fw_gm), render_graph(state.bw_gm)) if ctx.keep_graphs else None
    return dataclasses.replace(state, plan=made, modules=modules, texts_before=texts)


def predict(state: PassState, ctx: PassContext) -> PassState:
    """The memory timeline, node times and device profile (under the
    calibration where there is one) and the step without offload predicted.
    A graph with nothing to copy never measures the device (mode="budget"
    does: its budget is a fraction of the predicted peak)."""
    fw_gm, bw_gm, config = state.fw_gm, state.bw_gm, ctx.config
    count_cpu = _runs_on_cpu(fw_gm, ctx.graph_id, ctx.profile is not None)
    timeline = simulate_step(fw_gm, bw_gm, count_cpu)
    device = device_of(fw_gm)
    measure = bool(state.plan.groups) or config.mode == Mode.BUDGET
    profile = ctx.profile or device_profile(device, config.bandwidth_gbps, measure=measure)
    measure_kernels = config.measure_kernels and device.type == "cuda" and ctx.profile is None
    measured = None if profile is None else node_times(fw_gm, bw_gm, profile, measure_kernels)
    raw_profile, times, calibration = profile, measured, ctx.calibration
    if calibration is not None and measured is not None:
        times, profile = calibration.times(measured), calibration.profile(profile)
    baseline = None if times is None else predict_step(
        fw_gm, bw_gm, timeline, times, profile, _offset(ctx), _between(ctx)
    )
    return dataclasses.replace(
        state, count_cpu=count_cpu, timeline_before=timeline, measured=measured, raw_profile=raw_profile,
        times=times, profile=profile, baseline=baseline,
    )


def _offset(ctx: PassContext) -> int:
    return 0 if ctx.calibration is None else ctx.calibration.offset_for(ctx.request.level)


def _between(ctx: PassContext) -> float:
    return 0.0 if ctx.calibration is None else ctx.calibration.between_ms


def _reference(state: PassState, ctx: PassContext) -> Optional[StepPrediction]:
    """The step every budget and report is measured from: the first partition's."""
    return ctx.reference or state.baseline


def prune(state: PassState, ctx: PassContext) -> PassState:
    """Stops where the partition's own step without offload stands above
    the request's ``beat_ms``: the step simulator's step with offload is
    never below it (offload adds waits and runtime ops, never removes
    compute), so no plan on this partition could be kept."""
    beat, baseline = ctx.request.beat_ms, state.baseline
    if beat is None or baseline is None or baseline.step_ms <= beat:
        return state
    return dataclasses.replace(state, stopped=True, slower_than=beat)


def schedule(state: PassState, ctx: PassContext) -> PassState:
    """The copies' lifetimes; the selection (mode="auto" / "budget") and where each release and reload goes."""
    config, request, reference = ctx.config, ctx.request, _reference(state, ctx)
    budget = None if reference is None else budget_bytes(config, reference)
    allowed = None
    if config.mode == Mode.AUTO:
        allowed = config.max_overhead if reference is None else overhead_allowed(
            config.max_overhead, ctx.calibration, reference
        )
    lifetimes = copy_lifetimes(state.fw_gm, state.bw_gm, state.saved, state.plan.groups)
    made = schedule_copies(
        state.fw_gm, state.bw_gm, state.plan, state.timeline_before, lifetimes, state.times, state.profile, config,
        budget, request.max_copies, _offset(ctx), allowed, request.select_within, request.forced, ctx.host_limit,
    )
    return dataclasses.replace(
        state, plan=made.plan, schedule=made, lifetimes=lifetimes, budget=budget, allowed=allowed
    )


def offload(state: PassState, ctx: PassContext) -> PassState:
    """The rewrite: copies, releases and reloads into both graphs."""
    s = state.schedule
    fw_gm, bw_gm = rewrite_graphs(
        state.fw_gm, state.bw_gm, s.plan, state.lifetimes, ctx.config, s.reload_before, s.release_after,
        ctx.host_limit.runtime_cap,
    )
    return dataclasses.replace(state, fw_gm=fw_gm, bw_gm=bw_gm)


def not_offloaded(state: PassState, ctx: PassContext) -> PassState:
    """The rewrite disabled: the plan is still recorded, said unapplied."""
    state.schedule.plan.rewritten = False
    return state


def invariants(state: PassState, ctx: PassContext) -> PassState:
    """The check of the rewritten graphs (``rewriting/invariants.py``)."""
    check_rewrite(state.fw_gm, state.bw_gm, ctx.graph_id)
    return state


def predict_after(state: PassState, ctx: PassContext) -> PassState:
    """The memory timeline of the rewritten graphs and the plan's prediction on them."""
    config, made = ctx.config, state.plan
    timeline = simulate_step(state.fw_gm, state.bw_gm, state.count_cpu)
    made.modules = state.modules
    made.recompute_level = ctx.request.level
    made.budget = state.budget
    made.host_limit = ctx.host_limit
    made.max_overhead = config.max_overhead if config.mode == Mode.AUTO else None
    made.overhead_allowed = state.allowed
    if state.times is not None:
        made.baseline = _reference(state, ctx)
        made.prediction = predict_step(
            state.fw_gm, state.bw_gm, timeline, state.times, state.profile, _offset(ctx), _between(ctx)
        )
    return dataclasses.replace(state, timeline_after=timeline)


ATTEMPT_PASSES: tuple[Pass, ...] = (
    Pass("partition", partition),
    Pass("saved_set", saved_set),
    Pass("plan", plan),
    Pass("predict", predict),
    Pass(PassName.PRUNE, prune),
    Pass("schedule", schedule),
    Pass(PassName.OFFLOAD, offload, when_disabled=not_offloaded),
    Pass(PassName.INVARIANTS, invariants, requires=(PassName.OFFLOAD,)),
    Pass("predict_after", predict_after),
)


def with_host_limit(ctx: PassContext) -> PassContext:
    """``ctx`` with its host memory limit resolved (``host_limit.resolve_host_limit``;
    a plan for a named device profile is not limited by this host); a re-plan
    keeps its prior plan's (this host's memory then counts that plan's
    pinned copies as used)."""
    if ctx.host_limit is not None:
        return ctx
    kept = None if ctx.prior is None else ctx.prior.host_limit  # a re-plan: the limit its plan was cut to
    return dataclasses.replace(
        ctx, host_limit=kept or resolve_host_limit(ctx.config.host_memory_limit, for_this_host=ctx.profile is None)
    )


def run_attempt(ctx: PassContext) -> Optional[PassState]:
    """``ATTEMPT_PASSES`` over ``ctx.joint`` as ``ctx.request`` asks (None:
    its saved set was planned already; stopped with ``slower_than``: not
    planned, ``prune``)."""
    state = run_passes(ATTEMPT_PASSES, PassState(), with_host_limit(ctx))
    return None if state.stopped and state.slower_than is None else state


def simulate(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, timeline, times, profile, calibration: Calibration,
    runtime_ops: bool = True,
) -> StepPrediction:
    """The step simulator over these rewritten graphs, from the uncalibrated
    node times and profile, under ``calibration`` (``runtime_ops`` False:
    their runtime ops skipped, the step without offload's time)."""
    return predict_step(
        fw_gm, bw_gm, timeline, calibration.times(times), calibration.profile(profile),
        calibration.peak_offset, calibration.between_ms, runtime_ops,
    )


def _has_tensors_on(gm: fx.GraphModule, device_type: str) -> bool:
    return any(
        isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].device.type == device_type for n in gm.graph.nodes
    )


def _runs_on_cpu(fw_gm: fx.GraphModule, graph_id: str, profiled: bool) -> bool:
    """Whether the graph's memory counts CPU tensors: it runs on the CPU.
    Under a device profile (``profiled``) a graph traced on the meta device
    is planned as on the GPU; one on real CPU tensors still counts them,
    else its predicted peak would be 0."""
    if _has_tensors_on(fw_gm, "cuda") or (profiled and not _has_tensors_on(fw_gm, "cpu")):
        return False
    log.info(
        "offload_pass: %s runs on CPU: the rewrite is the same, the copies run "
        "synchronously into separate host buffers and save no memory",
        graph_id,
    )
    return True
