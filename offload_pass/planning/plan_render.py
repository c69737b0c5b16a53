"""The plan in words: the table of saved values and the summary under it.

Takes: an ``OffloadPlan`` (read through its attributes only, so this module
imports no plan module). Gives ``plan_text(plan)``, what ``str(plan)``
prints: one row per saved value (decision and reason), then what was
offloaded, kept and recomputed, the host pool, the selection, the predicted
peak and step, and how the plan was calibrated and measured.
"""

from __future__ import annotations

from typing import Optional

from offload_pass.enums import ReplanReason
from offload_pass.units import format_bytes, mib

__all__ = ["plan_text"]

_HEADER = ("saved", "op", "module", "role", "shape", "dtype", "MiB", "decision", "reason")


def plan_text(plan) -> str:
    """``plan`` (an ``OffloadPlan``) as its title, table and summary lines."""
    title = f"offload plan {plan.graph_id}" + ("" if plan.rewritten else " (rewrite disabled)")
    return "\n".join([title, *_table(plan.entries), *_summary(plan)])


def _table(entries) -> list[str]:
    rows = [
        (
            e.name, e.op, e.module or "-", e.role or "-", "x".join(str(s) for s in e.shape) or "-",
            e.dtype, f"{mib(e.nbytes):.2f}", e.decision, e.reason,
        )
        for e in entries
    ]
    widths = [max(len(str(r[i])) for r in [_HEADER, *rows]) for i in range(len(_HEADER))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [_HEADER, *rows]]


def _summary(plan) -> list[str]:
    lines = [
        f"offloaded {mib(plan.offloaded_bytes):.2f} MiB in {len(plan.groups)} copies "
        f"({len(plan.offloaded)} saved tensors); kept {mib(plan.kept_bytes):.2f} MiB"
    ]
    no_gain = plan.kept_without_gain
    if no_gain:
        lines.append(
            f"kept {len(no_gain)} marked tensors ({mib(sum(e.nbytes for e in no_gain)):.2f} MiB) "
            "because offloading them would not lower the predicted peak; "
            "make_backend(keep_if_no_gain=False) offloads them anyway"
        )
    if plan.recompute_level is not None:
        lines.append(_recompute_line(plan))
    if plan.host_pool:
        nbytes, slots = plan.host_pool
        lines.append(f"host pool {mib(nbytes):.2f} MiB per call ({slots} slots, page-aligned)")
    if plan.selection is not None:
        lines.append(plan.selection)
    if plan.baseline is not None and plan.prediction is not None:
        lines.extend(_prediction_lines(plan))
    if plan.calibration is not None and plan.calibration.carried:
        lines.append(f"planned under the calibration of an earlier compile, {plan.calibration.describe()}")
    elif plan.calibration is not None:
        lines.append(f"planned again{_replanned_because(plan.replan_reason)}, {plan.calibration.describe()}")
    if plan.measured is not None:
        lines.append(plan.measured.describe())
    if plan.fallback is not None:
        lines.append(f"not run: {plan.fallback}")
    return lines


def _recompute_line(plan) -> str:
    """What the partition under a recompute level recomputes, and what it newly saves for that."""
    recomputed, newly = plan.recomputed_bytes, plan.saved_for_recompute_bytes
    partition = f"partitioned under activation_memory_budget={plan.recompute_level:g}"
    saves = f"it saves {len(plan.saved_for_recompute)} tensors ({mib(newly):.2f} MiB) the first partition did not"
    less = f"{mib(recomputed - newly):.2f} MiB less saved in all"
    return (
        f"recomputed {len(plan.recomputed)} saved tensors ({mib(recomputed):.2f} MiB) in backward: {partition}; "
        f"{saves}, which the recompute starts from: {less}"
    )


def _prediction_lines(plan) -> list[str]:
    before, after = plan.baseline, plan.prediction
    bound = "" if plan.ideal_peak is None else f"; every copy off the device between its uses: {mib(plan.ideal_peak):.2f} MiB"
    if plan.ideal_peak is not None and plan.reload_headroom:
        share = f", {plan.reload_headroom / plan.offloaded_bytes:.1%} of the bytes offloaded" if plan.offloaded_bytes else ""
        bound += f", reloads allowed {format_bytes(plan.reload_headroom)} above it (reload_headroom{share})"
    change = f" ({plan.predicted_overhead:+.1%})" if before.step_ms else ""
    return [
        f"predicted peak {mib(before.peak):.2f} -> {mib(after.peak):.2f} MiB "
        f"(-{mib(before.peak - after.peak):.2f} MiB){bound}",
        f"predicted step {before.step_ms:.2f} -> {after.step_ms:.2f} ms{change}",
        f"  with offload: {after.describe()}",
    ]


def _replanned_because(reason: Optional[ReplanReason]) -> str:
    # The feedback loop's tolerances, quoted where a re-plan says why it ran.
    from offload_pass.planning.calibration import REPLAN_TOLERANCE, STALL_TOLERANCE

    if reason == ReplanReason.PREDICTION:
        return (
            f" (the prediction was off by more than {REPLAN_TOLERANCE:.0%}, or its stalls on copies by more "
            f"than {STALL_TOLERANCE:.0%} of the step)"
        )
    if reason == ReplanReason.BUDGET:
        return " (the measured peak was over the budget)"
    if reason == ReplanReason.OVERHEAD:
        return (
            " (the measured step was over max_overhead: over plain Inductor's graph measured beside it, or, "
            "where that was not measured, its stalls on copies and its forward past the device's speed by more "
            f"than {STALL_TOLERANCE:.0%} of the step)"
        )
    if reason == ReplanReason.PEAK:
        return f" (the peak of the plan before, itself a re-plan, was off by more than {REPLAN_TOLERANCE:.0%})"
    if reason == ReplanReason.ROOM:
        return (
            " (the measured step was under max_overhead against plain Inductor's graph measured beside it by "
            "more than the room margin, with copies left to choose: it spends the rest)"
        )
    return ""

