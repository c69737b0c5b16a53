"""Stage 3e, scheduling policy: which of the planned copies to make, and where
each release and reload goes.

Takes: the forward and backward graphs (before the rewrite), the plan from
``plan.plan_saved_tensors``, the simulated step without offload
(``timeline.simulate_step``), the copies' lifetimes and the config. Gives: a
``Schedule``: the plan with the copies that were not chosen kept (and why),
and the release / reload points of the cost model (None: the fixed schedule
of ``max_inflight`` / ``prefetch``). The plan records what was predicted.

Policy by ``OffloadConfig.mode``: "marked" keeps the copies that would not
lower the predicted peak (``keep_if_no_gain``); "auto" and "budget" let
``selection`` choose among the candidates.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import torch
import torch.fx as fx

from offload_pass.config import OffloadConfig
from offload_pass.enums import Mode, ScheduleKind
from offload_pass.planning.cost_model import DeviceProfile, device_profile, estimate_node_ms
from offload_pass.planning.schedules import release_schedule, reload_schedule
from offload_pass.planning.lifetimes import CopyLifetime, ideal_live
from offload_pass.planning.plan import OffloadPlan, keep_groups, keep_offloads_without_gain
from offload_pass.planning.selection import candidates, choose_auto, choose_for_budget, simulate_offload
from offload_pass.planning.timeline import Timeline
from offload_pass.units import format_bytes

__all__ = ["Schedule", "schedule_copies"]

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
    config: OffloadConfig,
) -> Schedule:
    """Trim or select the copies, then place each release and reload (cost
    model) from the simulated timeline without offload."""
    if not plan.groups:
        return Schedule(plan)
    if config.mode != Mode.MARKED or config.schedule == ScheduleKind.COST:
        profile = device_profile(device_of(fw_gm), config.bandwidth_gbps)
        node_ms = (estimate_node_ms(fw_gm, profile), estimate_node_ms(bw_gm, profile))
    if config.mode != Mode.MARKED:
        plan = _select(plan, timeline, node_ms, [lifetimes[g.storage] for g in plan.groups], profile, config)
    elif config.keep_if_no_gain:
        off_device = {storage: lt.off_device for storage, lt in lifetimes.items()}
        plan = keep_offloads_without_gain(plan, timeline.live_bytes, off_device)
    if config.schedule != ScheduleKind.COST or not plan.groups:
        return Schedule(plan)
    chosen = [lifetimes[g.storage] for g in plan.groups]
    # The ideal: each copy off the device from its last forward use to its
    # first backward use. Its peak is the ceiling neither the releases nor
    # the prefetches may lift.
    live = ideal_live(timeline.live_bytes, chosen)
    ceiling = max(live, default=0)
    split = timeline.phases.count("forward")
    release_after = release_schedule(fw_gm, chosen, live[:split], ceiling, profile)
    reload_before = reload_schedule(bw_gm, chosen, live[split:], ceiling, profile, config.prefetch_bytes)
    plan.predicted_ideal_peak = ceiling
    plan.release_after = dict(release_after)
    plan.reload_before = dict(reload_before)
    plan.cost_profile = profile.source
    plan.predicted_compute_ms = (sum(node_ms[0]), sum(node_ms[1]))
    return Schedule(plan, release_after, reload_before)


def _select(
    plan: OffloadPlan,
    timeline: Timeline,
    node_ms: tuple[list[float], list[float]],
    lifetimes: list[CopyLifetime],
    profile: DeviceProfile,
    config: OffloadConfig,
) -> OffloadPlan:
    """mode="auto" / "budget": keep the candidate copies the selection does
    not choose, and record its prediction in the plan. ``node_ms``: estimated
    times of the forward's and the backward's nodes."""
    split = timeline.phases.count("forward")
    fw_ms = node_ms[0][:split]
    bw_ms = node_ms[1][: len(timeline.live_bytes) - split]
    pool = candidates(lifetimes)
    speeds = (profile.bytes_per_ms("d2h"), profile.bytes_per_ms("h2d"))
    base = simulate_offload(fw_ms, bw_ms, timeline.live_bytes, [], *speeds)
    if config.mode == Mode.AUTO:
        chosen, predicted = choose_auto(fw_ms, bw_ms, timeline.live_bytes, pool, *speeds, config.max_overhead)
        note = f"mode=auto (max_overhead {config.max_overhead:.1%})"
        reason = f"not chosen by mode=auto: no gain at the peak within max_overhead={config.max_overhead}"
    else:
        budget = config.memory_budget
        target = int(budget * base.peak) if isinstance(budget, float) else budget
        chosen, predicted = choose_for_budget(fw_ms, bw_ms, timeline.live_bytes, pool, *speeds, target)
        note = f"mode=budget ({format_bytes(target)})"
        if predicted.peak > target:
            note += (
                f": out of reach by offload alone: the lowest predicted peak is "
                f"{format_bytes(predicted.peak)}, {format_bytes(predicted.peak - target)} over the "
                f"budget (predicted peak without offload {format_bytes(base.peak)})"
            )
            log.warning("offload_pass: %s %s", plan.graph_id, note)
        reason = "not chosen by mode=budget: not needed to reach the budget"
    keys = {c.key for c in chosen}
    plan = keep_groups(plan, {g.storage for g in plan.groups if g.storage not in keys}, reason)
    plan.selection = (
        f"{note}: chose {len(chosen)} of {len(pool)} copies, predicted peak "
        f"{format_bytes(base.peak)} -> {format_bytes(predicted.peak)}"
    )
    plan.predicted_step_ms = (base.step_ms, predicted.step_ms)
    plan.predicted_selection_peak = (base.peak, predicted.peak)
    return plan
