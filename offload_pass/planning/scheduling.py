"""Stage 3e, scheduling policy: which of the planned copies to make, and where
each release and reload goes.

Takes: the forward and backward graphs (before the rewrite), the plan from
``plan.plan_saved_tensors``, the simulated step without offload
(``timeline.simulate_step``), the copies' lifetimes, the node times and
device profile the step simulator uses (``step_model``), and the config.
Gives: a ``Schedule``: the plan with the copies that were not chosen kept
(and why), and the release / reload points of the cost model (None: the
fixed schedule of ``max_inflight`` / ``prefetch``).

Policy by ``OffloadConfig.mode``: "marked" keeps the copies that would not
lower the predicted peak (``keep_if_no_gain``); "auto" and "budget" let
``selection`` choose among the candidates.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Union

import torch
import torch.fx as fx

from offload_pass.config import DEFAULT_RELOAD_HEADROOM, OffloadConfig
from offload_pass.enums import Mode, NoteCode, ScheduleKind
from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.schedules import release_schedule, reload_ceiling, reload_schedule
from offload_pass.planning.host_limit import HostLimit, fit_to_host
from offload_pass.planning.lifetimes import CopyLifetime, ideal_live
from offload_pass.planning.notes import note
from offload_pass.planning.plan import OffloadPlan, keep_groups, keep_offloads_without_gain
from offload_pass.planning.reasons import Detail, Reason, detail
from offload_pass.planning.selection import StepWithoutOffload, candidates, choose_auto, choose_for_budget
from offload_pass.planning.step_model import NodeTimes, StepPrediction, copy_op_costs
from offload_pass.planning.timeline import Timeline
from offload_pass.units import format_bytes

__all__ = ["Schedule", "budget_bytes", "check_budget", "device_of", "resolved_headroom", "schedule_copies"]

log = logging.getLogger("offload_pass")


@dataclasses.dataclass
class Schedule:
    plan: OffloadPlan
    release_after: Optional[dict[str, str]] = None  # storage -> forward node its release goes after
    reload_before: Optional[dict[str, str]] = None  # storage -> backward node its reload is issued before


def device_of(gm: fx.GraphModule) -> torch.device:
    """The CUDA device a graph runs on, else the CPU."""
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type == "cuda":
            return val.device
    return torch.device("cpu")


def schedule_copies(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    plan: OffloadPlan,
    timeline: Timeline,
    lifetimes: dict[str, CopyLifetime],
    times: Optional[NodeTimes],
    profile: Optional[DeviceProfile],
    config: OffloadConfig,
    budget: Optional[int] = None,
    max_copies: Optional[int] = None,
    peak_offset: int = 0,
    max_overhead: Optional[float] = None,
    select_within: Optional[float] = None,
    forced: Optional[frozenset[str]] = None,
    host_limit: Optional[HostLimit] = None,
) -> Schedule:
    """Trim or select the copies, then place each release and reload (cost
    model) from the simulated timeline without offload. ``times`` and
    ``profile`` are None only for a plan without copies (nothing to schedule).
    ``budget``: mode="budget", the peak to reach in bytes (``budget_bytes``);
    ``peak_offset``: the bytes a calibration found the memory timeline
    missing at the measured peak. The schedule works on the timeline itself,
    which a calibration does not move: its budget is lowered by that much.
    ``max_copies``: mode="auto", keep only the first that many copies of the
    selection's greedy order (the backend's check against the step simulator);
    ``max_overhead``: the slowdown it may spend over the step without
    offload as predicted (``calibration.overhead_allowed``; None:
    ``config.max_overhead``); ``select_within``: mode="auto", the slowdown
    the selection's coarse model may choose within (None: ``max_overhead``;
    the backend's retry under a step simulator that disagrees with it);
    ``forced``: mode="auto", copy these storages and no other (the
    backend's set measured within max_overhead before; None: select);
    ``host_limit``: the pinned host bytes the copies may hold
    (``host_limit.fit_to_host``, after the selection)."""
    if not plan.groups:
        return Schedule(plan)
    target = None if budget is None else budget - peak_offset
    if config.mode != Mode.MARKED:
        step = StepWithoutOffload(
            times.ordered(fw_gm, "forward"), times.ordered(bw_gm, "backward"), timeline.live_bytes,
            profile.bytes_per_ms("d2h"), profile.bytes_per_ms("h2d"),
            **copy_op_costs(times, fw_gm),
            reload_headroom=resolved_headroom(config), reload_target=target, prefetch_bytes=config.prefetch_bytes,
        )
        allowed = config.max_overhead if max_overhead is None else max_overhead
        plan = _select(
            plan, step, [lifetimes[g.storage] for g in plan.groups], config, budget, max_copies, peak_offset,
            allowed, allowed if select_within is None else select_within, forced,
        )
    elif config.keep_if_no_gain:
        off_device = {storage: lt.off_device for storage, lt in lifetimes.items()}
        plan = keep_offloads_without_gain(plan, timeline.live_bytes, off_device)
    plan = fit_to_host(plan, host_limit)
    if config.schedule != ScheduleKind.COST or not plan.groups:
        return Schedule(plan)
    return _place_copies(fw_gm, bw_gm, plan, timeline, lifetimes, times, profile, config, target)


def _place_copies(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    plan: OffloadPlan,
    timeline: Timeline,
    lifetimes: dict[str, CopyLifetime],
    times: NodeTimes,
    profile: DeviceProfile,
    config: OffloadConfig,
    target: Optional[int],
) -> Schedule:
    """schedule="cost": each release and reload of ``plan``'s copies, placed
    under the ideal's peak (the reloads up to ``reload_ceiling``, never past
    the budget ``target`` on the timeline), and recorded on the plan."""
    chosen = [lifetimes[g.storage] for g in plan.groups]
    # The ideal: each copy off the device from its last forward use to its
    # first backward use. Its peak is the ceiling the releases may not lift,
    # nor the prefetches beyond reload_headroom (memory the user trades for
    # reloads that start earlier), and never past a budget.
    live = ideal_live(timeline.live_bytes, chosen)
    ceiling = max(live, default=0)
    reloads_up_to = reload_ceiling(ceiling, resolved_headroom(config), plan.offloaded_bytes, target)
    split = timeline.phases.count("forward")
    release_after = release_schedule(
        fw_gm, chosen, live[:split], ceiling, profile, times.ordered(fw_gm, "forward")
    )
    reload_before = reload_schedule(
        bw_gm, chosen, live[split:], reloads_up_to, profile, times.ordered(bw_gm, "backward"), config.prefetch_bytes
    )
    plan.ideal_peak = ceiling
    plan.reload_headroom = reloads_up_to - ceiling
    plan.release_after = dict(release_after)
    plan.reload_before = dict(reload_before)
    return Schedule(plan, release_after, reload_before)


def _select(
    plan: OffloadPlan,
    step: StepWithoutOffload,
    lifetimes: list[CopyLifetime],
    config: OffloadConfig,
    budget: Optional[int],
    max_copies: Optional[int] = None,
    peak_offset: int = 0,
    max_overhead: float = 0.0,
    select_within: Optional[float] = None,
    forced: Optional[frozenset[str]] = None,
) -> OffloadPlan:
    """mode="auto" / "budget": keep the candidate copies the selection does
    not choose, and say in the plan what was chosen (its first note). ``budget`` is met on
    the memory timeline, less ``peak_offset`` (what the timeline missed)."""
    pool = candidates(lifetimes)
    if config.mode == Mode.AUTO and forced is not None:
        chosen = [c for c in pool if c.key in forced]
        said = (NoteCode.SELECTION_MEASURED, {"max_overhead": config.max_overhead})
        why = (Reason.AUTO_MEASURED_SET, ())
    elif config.mode == Mode.AUTO:
        # Below 0 (plain Inductor measured faster than predicted by more
        # than max_overhead) no copy fits.
        within = max_overhead if select_within is None else select_within
        chosen = choose_auto(step, pool, within)[0] if within >= 0 else []
        chosen = chosen if max_copies is None else chosen[:max_copies]
        said = (
            NoteCode.SELECTION_AUTO, {"max_overhead": config.max_overhead, "allowed": max_overhead, "within": within}
        )
        why = (Reason.AUTO_NOT_CHOSEN, detail(max_overhead=config.max_overhead))
    else:
        if budget is None:
            raise ValueError("schedule_copies: mode='budget' needs the budget in bytes (budget_bytes)")
        chosen, _ = choose_for_budget(step, pool, budget - peak_offset)
        said = (NoteCode.SELECTION_BUDGET, {"budget": budget, "peak_offset": peak_offset})
        why = (Reason.BUDGET_NOT_NEEDED, ())
    keys = {c.key for c in chosen}
    plan = keep_groups(plan, {g.storage for g in plan.groups if g.storage not in keys}, *why)
    if config.mode == Mode.BUDGET:
        plan = _say_chosen(plan, Reason.BUDGET_CHOSEN, detail(budget=budget))
    plan.notes = (note(said[0], **said[1], chosen=len(chosen), candidates=len(pool)),)
    return plan


def _say_chosen(plan: OffloadPlan, code: Reason, values: Detail) -> OffloadPlan:
    """The copies chosen among every activation (nothing marked) say which
    mode chose them; a marked one keeps its mark as its reason."""
    chosen = {m for g in plan.groups for m in g.members}
    entries = [
        dataclasses.replace(e, code=code, detail=values)
        if e.name in chosen and e.code == Reason.UNMARKED_CANDIDATE else e
        for e in plan.entries
    ]
    return dataclasses.replace(plan, entries=entries)


def resolved_headroom(config: OffloadConfig) -> Union[int, float]:
    """``OffloadConfig.reload_headroom`` with None resolved to its default
    (``DEFAULT_RELOAD_HEADROOM``): bytes, or a float share of the bytes
    offloaded (``schedules.reload_ceiling`` turns it into bytes)."""
    return DEFAULT_RELOAD_HEADROOM if config.reload_headroom is None else config.reload_headroom


def budget_bytes(config: OffloadConfig, without_offload: StepPrediction) -> Optional[int]:
    """mode="budget": ``memory_budget`` in bytes, a fraction of the peak the
    memory timeline predicts without offload (plain Inductor's partition) or
    bytes; else None. A calibration's ``peak_offset`` stays out of it: it is
    what the timeline missed on the partition the device measured (a
    recomputing one, say), not on plain Inductor's; counted in, it would
    lift the budget itself."""
    budget = config.memory_budget
    if config.mode != Mode.BUDGET:
        return None
    return int(budget * without_offload.timeline_peak) if isinstance(budget, float) else budget


def check_budget(
    plan: OffloadPlan, target: Optional[int], recompute_tried: bool, floor: Optional[int] = None
) -> None:
    """mode="budget": say (an OUT_OF_REACH note on the plan, and the log)
    when the predicted peak of the rewritten step is over the budget
    ``target`` (bytes; None: no budget). ``floor``: the lowest peak the
    search can build a plan for (bytes; None: not known), which the note
    asks the user to budget at least."""
    if target is None or plan.baseline is None or plan.prediction is None:
        return
    if plan.prediction.peak <= target:
        return
    made = note(
        NoteCode.OUT_OF_REACH, target=target, peak=plan.prediction.peak, without=plan.baseline.timeline_peak,
        recompute_tried=recompute_tried, floor=floor,
    )
    plan.notes = (*plan.notes, made)
    log.warning("offload_pass: %s mode=budget (%s): %s", plan.graph_id, format_bytes(target), made)
