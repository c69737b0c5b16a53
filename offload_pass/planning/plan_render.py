"""The plan in words: the table of saved values and the summary under it.

Takes: an ``OffloadPlan``, or the ``CompileRecord`` holding one (read
through their attributes only, so this module imports no plan or record
module). Gives ``plan_text(plan)``, what ``str(plan)`` prints: one row per
saved value the plan decides about (decision and reason), the graph inputs
(parameters and other inputs, never offloaded) folded into one line of
counts and bytes, then what was offloaded, kept and recomputed, the host
pool, the selection, the predicted peak and step; ``record_text(record)``,
what ``str(record)`` prints: that text, then how the plan was calibrated
and measured and what runs in its place; and ``plan_unit(plan)``, the one
unit every byte figure of the text is in (that of its largest figure).
"""

from __future__ import annotations

from typing import Optional

from offload_pass.enums import ReplanReason
from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.byte_unit import ByteUnit, unit_for
from offload_pass.planning.reasons import Reason

__all__ = ["FOLDED", "plan_text", "plan_unit", "record_text"]

_HEADER = ("saved", "op", "module", "role", "shape", "dtype", "{unit}", "decision", "reason")

# Reason codes (``reasons.Reason``) of the saved values the table folds into
# one line: graph inputs, never offloaded, which would otherwise crowd out
# the activations the plan decides about (a model has one per parameter).
FOLDED = {
    Reason.PARAMETER: ("parameter or buffer", "parameters or buffers"),
    Reason.GRAPH_INPUT: ("other input", "other inputs"),
    Reason.INPUT_VIEW: ("view of an input", "views of inputs"),
}


def plan_text(plan) -> str:
    """``plan`` (an ``OffloadPlan``) as its title, table and summary lines,
    every byte figure in the one unit of its largest (``plan_unit``)."""
    title = f"offload plan {plan.graph_id}" + ("" if plan.rewritten else " (rewrite disabled)")
    unit = plan_unit(plan)
    # Activations first; symbolic ints, which take no memory, after them.
    listed = sorted((e for e in plan.entries if e.code not in FOLDED), key=lambda e: e.code == Reason.SYMINT)
    folded = [e for e in plan.entries if e.code in FOLDED]
    return "\n".join([title, *_table(listed, unit), *_folded_line(folded, unit), *_summary(plan, unit)])


def plan_unit(plan) -> ByteUnit:
    """The unit of the plan's largest byte figure: a saved value, the bytes
    offloaded or kept, a predicted peak, the host pool."""
    peaks = [p.peak for p in (plan.baseline, plan.prediction) if p is not None]
    pool = plan.host_pool[0] if plan.host_pool else None
    return unit_for(
        *(e.nbytes for e in plan.entries), plan.offloaded_bytes, plan.kept_bytes, *peaks, plan.ideal_peak, pool,
    )


def _table(entries, unit: ByteUnit) -> list[str]:
    header = tuple(h.format(unit=unit) for h in _HEADER)
    rows = [
        (
            e.name, e.op, e.module or "-", e.role or "-", "x".join(str(s) for s in e.shape) or "-",
            e.dtype, unit.number(e.nbytes), e.decision, e.reason,
        )
        for e in entries
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]


def _folded_line(folded, unit: ByteUnit) -> list[str]:
    """The graph inputs the table leaves out, as one line: how many of each kind, and their bytes."""
    if not folded:
        return []
    kinds = []
    for code, (one, many) in FOLDED.items():
        count = sum(1 for e in folded if e.code == code)
        if count:
            kinds.append(f"{count} {one if count == 1 else many}")
    return [
        f"graph inputs, kept and not listed: {len(folded)} ({unit(sum(e.nbytes for e in folded))}): "
        + ", ".join(kinds)
    ]


def _summary(plan, unit: ByteUnit) -> list[str]:
    lines = [
        f"offloaded {unit(plan.offloaded_bytes)} in {len(plan.groups)} copies "
        f"({len(plan.offloaded)} saved tensors); kept {unit(plan.kept_bytes)}"
    ]
    no_gain = plan.kept_without_gain
    if no_gain:
        lines.append(
            f"kept {len(no_gain)} marked tensors ({unit(sum(e.nbytes for e in no_gain))}) "
            "because offloading them would not lower the predicted peak; "
            "make_backend(keep_if_no_gain=False) offloads them anyway"
        )
    if plan.recompute_level is not None:
        lines.append(_recompute_line(plan, unit))
    if plan.host_pool:
        nbytes, slots = plan.host_pool
        lines.append(f"host pool {unit(nbytes)} per call ({slots} slots, page-aligned)")
    if plan.selection is not None:
        lines.append(plan.selection)
    if plan.baseline is not None and plan.prediction is not None:
        lines.extend(_prediction_lines(plan, unit))
    return lines


def record_text(record) -> str:
    """``record`` (a ``reporting.compile_record.CompileRecord``) as its
    plan's text (``plan_text``) with the feedback loop's lines under the
    summary: the calibration it was planned under and why it was planned
    again, the prediction checked against measured calls, what runs in
    its place."""
    return "\n".join([plan_text(record.plan), *_feedback_lines(record)])


def _feedback_lines(record) -> list[str]:
    lines = []
    if record.calibration is not None and record.calibration.carried:
        lines.append(f"planned under the calibration of an earlier compile, {record.calibration.describe()}")
    elif record.calibration is not None:
        lines.append(f"planned again{_replanned_because(record.replan_reason)}, {record.calibration.describe()}")
    if record.measured is not None:
        lines.append(record.measured.describe())
    if record.fallback is not None:
        lines.append(f"not run: {record.fallback}")
    return lines


def _recompute_line(plan, unit: ByteUnit) -> str:
    """What the partition under a recompute level recomputes, and what it newly saves for that."""
    recomputed, newly = plan.recomputed_bytes, plan.saved_for_recompute_bytes
    level = plan.recompute_level
    partition = (
        f"partitioned with the {level}" if isinstance(level, BlockCut)
        else f"partitioned under activation_memory_budget={level:g}"
    )
    saves = f"it saves {len(plan.saved_for_recompute)} tensors ({unit(newly)}) the first partition did not"
    less = f"{unit(recomputed - newly)} less saved in all"
    return (
        f"recomputed {len(plan.recomputed)} saved tensors ({unit(recomputed)}) in backward: {partition}; "
        f"{saves}, which the recompute starts from: {less}"
    )


def _prediction_lines(plan, unit: ByteUnit) -> list[str]:
    before, after = plan.baseline, plan.prediction
    bound = "" if plan.ideal_peak is None else f"; every copy off the device between its uses: {unit(plan.ideal_peak)}"
    if plan.ideal_peak is not None and plan.reload_headroom:
        share = f", {plan.reload_headroom / plan.offloaded_bytes:.1%} of the bytes offloaded" if plan.offloaded_bytes else ""
        bound += f", reloads allowed {unit(plan.reload_headroom)} above it (reload_headroom{share})"
    change = f" ({plan.predicted_overhead:+.1%})" if before.step_ms else ""
    return [
        f"predicted peak {unit.number(before.peak)} -> {unit(after.peak)} "
        f"(-{unit(before.peak - after.peak)}){bound}",
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

