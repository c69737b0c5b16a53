"""The pipeline's search passes: which partition and which selection a graph keeps.

Takes: the first run of the attempt passes (``passes.run_attempt``: the
partition as configured, its selection) and a ``PassContext``. Gives:
``SEARCH_PASSES``, run after it with the same signature: mode="budget"'s
recompute levels (``recompute``), mode="auto"'s hold of the step simulator
over the selection (``auto_within_overhead``) and its measured floor
(``measured_floor``), and the budget's check. Each search asks the attempt
passes for another partition or selection with a ``PlanRequest`` and keeps
one; what it did is a ``SelectionNote`` on the kept state.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Optional

import torch
import torch.fx as fx

from offload_pass.enums import Mode, NoteCode, PassName
from offload_pass.pipeline.attempts import Outcome, Run, Tried, partition_logged, trial_of
from offload_pass.pipeline.deep_cuts import deep_attempts, mixed_attempts
from offload_pass.pipeline.gc_pause import between_attempts, collections_paused
from offload_pass.pipeline.min_cuts import exact_min_cuts, shared_min_cuts
from offload_pass.pipeline.notes import add_note, note
from offload_pass.pipeline.passes import (
    Pass, PassContext, PassState, PlanRequest, run_attempt, run_passes, with_host_limit,
)
from offload_pass.planning.blocks import BlockCut, Blocks, find_blocks
from offload_pass.planning.calibration import Calibration
from offload_pass.planning.cut_bound import cut_step_bound
from offload_pass.planning.recompute import (
    RECOMPUTE_LEVELS, Trial, choose_trial, levels_out_of_reach, levels_to_retry, newly_saved, recompute_entries,
    saved_again_above, search_goes_on,
)
from offload_pass.planning.saved_set import tensor_bytes
from offload_pass.planning.scheduling import budget_bytes, check_budget
from offload_pass.planning.trial import Pruned

# mode="auto"'s searches: one attempt per request.
Attempt = Callable[[PlanRequest], Optional[PassState]]

__all__ = [
    "SEARCH_PASSES", "auto_within_overhead", "forward_inputs_bytes", "measured_floor_attempt", "recompute_for_budget",
    "run_pipeline",
]

log = logging.getLogger("offload_pass")

# mode="auto", where the step simulator predicts the selection's choice over
# the limit: the shares of the limit the selection chooses within once more.
SELECT_WITHIN_SHARES = (0.5, 0.25)


def _attempt(ctx: PassContext) -> Optional[PassState]:
    """``passes.run_attempt``, then the garbage it left collected (``gc_pause``)."""
    state = run_attempt(ctx)
    between_attempts()
    return state


def _budget(state: PassState, ctx: PassContext) -> Optional[int]:
    return None if state.plan.baseline is None else budget_bytes(ctx.config, state.plan.baseline)


def _wants_recompute(state: PassState, ctx: PassContext) -> bool:
    """Recompute is tried where offload alone misses the budget, and where
    it reaches it only at a cost (the fastest within it is kept)."""
    budget, plan = _budget(state, ctx), state.plan
    return budget is not None and (plan.prediction.peak > budget or (plan.predicted_overhead or 0.0) > 1e-9)


def recompute(state: PassState, ctx: PassContext) -> PassState:
    """mode="budget": ``recompute_for_budget`` over the partitions of ``RECOMPUTE_LEVELS``."""
    if not _wants_recompute(state, ctx):
        return state
    budget = _budget(state, ctx)
    skip: tuple[Trial, ...] = ()
    prior, calibration = ctx.prior, ctx.calibration
    if prior is not None and calibration is not None:
        skip = levels_out_of_reach(
            prior.recompute_trials + prior.recompute_skipped, prior.recompute_level, budget, calibration.offset_for,
        )

    def run(request: PlanRequest, seen: set) -> Optional[PassState]:
        return _attempt(dataclasses.replace(ctx, request=request, reference=state.plan.baseline, seen=seen))

    blocks = find_blocks(ctx.joint.graph)
    disabled = ctx.config.disabled_passes
    prune = PassName.PRUNE not in disabled
    with shared_min_cuts() as cuts:
        kept = recompute_for_budget(
            state, run, budget, skip, forward_inputs_bytes(ctx.joint), blocks, calibration,
            _cut_bound(state, ctx) if prune else None, prune, PassName.MIXED_CUTS not in disabled,
        )
    log.debug("offload_pass: %s mode=budget: min-cuts solved %d, shared %d", ctx.graph_id, cuts["solved"], cuts["shared"])
    return dataclasses.replace(kept, recompute_tried=True)


def _cut_bound(first: PassState, ctx: PassContext) -> Optional[Callable[[BlockCut], Optional[float]]]:
    """A block cut's step bound (``cut_bound.cut_step_bound``) from the first
    partition's node times; None where there are none or the joint's
    forward outputs are not counted. Each cut's bound is computed once per
    graph the joint holds (the count search and the run ask for the same
    cuts; a partition replaces the joint's graph with a copy)."""
    outputs = ctx.kwargs.get("num_fwd_outputs")
    if first.times is None or first.baseline is None or outputs is None:
        return None
    known: dict = {"graph": None, "blocks": None, "bounds": {}}

    def bound(cut: BlockCut) -> Optional[float]:
        graph = ctx.joint.graph
        if known["graph"] is not graph:
            known.update(graph=graph, blocks=find_blocks(graph), bounds={})
        blocks, bounds = known["blocks"], known["bounds"]
        if blocks is None or len(blocks) != cut.of:
            return None
        if cut not in bounds:
            bounds[cut] = cut_step_bound(graph, blocks, cut, outputs, first.times, first.baseline.between_ms)
        return bounds[cut]

    return bound


def forward_inputs_bytes(joint: fx.GraphModule) -> Optional[int]:
    """The bytes of the joint graph's forward inputs (the placeholders
    PyTorch's partitioner takes as primals or forward seeds), the smallest
    saved set it sizes the others against; None where a size is symbolic."""
    from torch._functorch.partitioners import _is_fwd_seed_offset, _is_primal

    total = 0
    for node in joint.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if not (_is_primal(node) or _is_fwd_seed_offset(node)) or not isinstance(val, torch.Tensor):
            continue
        nbytes, symbolic = tensor_bytes(val)
        if symbolic:
            return None
        total += nbytes
    return total


def _saved_bytes(attempt: PassState) -> Optional[int]:
    """The bytes a partition saves; None where a size is symbolic."""
    if any(t.symbolic for t in attempt.saved):
        return None
    return sum(t.nbytes for t in attempt.saved)


def _partition_levels(
    first: PassState, run: Run, budget: int, skipped: set, inputs_bytes: Optional[int], seen: set
) -> list:
    """Partition at each level from light to full recompute (less ``skipped``)
    while ``search_goes_on``; levels where PyTorch's partitioner would save
    again the set a level above saved (``saved_again_above``) are not partitioned."""
    attempts = [first]
    first_bytes = _saved_bytes(first)
    repeats: Optional[tuple[float, float]] = None  # (the level last partitioned, above which lower levels repeat it)
    for level in RECOMPUTE_LEVELS:
        if level in skipped:
            continue
        # Level 0 is never skipped: PyTorch saves only the inputs there, whatever the ratios.
        if repeats is not None and 0 < level and level > repeats[1]:
            log.info(
                "offload_pass: %s mode=budget: activation_memory_budget=%g not partitioned: PyTorch's partitioner "
                "saves there what it saved at %g (every level above %.2f)",
                first.plan.graph_id, level, repeats[0], repeats[1],
            )
            continue
        attempt = partition_logged(first, run, level, seen)
        if isinstance(attempt, Pruned):
            break  # its recompute alone is slower than a partition within the budget: deeper levels recompute more
        if attempt is None:
            continue
        attempts.append(attempt)
        saved_bytes = _saved_bytes(attempt)
        above = None if None in (saved_bytes, first_bytes, inputs_bytes) else saved_again_above(
            saved_bytes, first_bytes, inputs_bytes
        )
        repeats = None if above is None else (level, above)
        if not search_goes_on([trial_of(a) for a in attempts[1:]], budget):
            break
    return attempts


def recompute_for_budget(
    first: PassState, run: Run, budget: int, skip: tuple[Trial, ...], inputs_bytes: Optional[int] = None,
    blocks: Optional[Blocks] = None, calibration: Optional[Calibration] = None,
    bound: Optional[Callable[[BlockCut], Optional[float]]] = None, prune: bool = True, mixed: bool = True,
) -> PassState:
    """mode="budget": partition again under ``RECOMPUTE_LEVELS`` (less
    ``skip``, a re-plan's levels out of reach before; where no level tried
    reaches the budget, those of them ``levels_to_retry`` gives are
    partitioned after all), then the block cuts and (``mixed``) the block
    cuts mixed with the fastest level (``deep_cuts``), plan offload on each new saved
    set, and keep the one the step simulator predicts fastest within the budget
    (``choose_trial``). ``run(request, seen)``: the attempt passes. The
    tensors the kept partition recomputes enter its plan as ``recompute``;
    every trial, the plan's ``recompute_trials``. ``calibration``: the one
    this compile plans under, whose offsets move the skipped levels' peaks.
    ``prune``: partitions that cannot be kept are not planned, block cuts
    whose ``bound`` says so not made (``attempts.Tried``); a level pruned
    ends the levels' search."""
    seen = {frozenset(t.name for t in first.saved)}
    skipped = {t.level for t in skip}
    tried = Tried(budget, [first], bound, prune)
    guarded = tried.guard(run)
    attempts = _partition_levels(first, guarded, budget, skipped, inputs_bytes, seen)

    def unskipped(request: PlanRequest, seen: set) -> Outcome:
        return None if request.level in skipped else guarded(request, seen)

    most = None if blocks is None else (lambda keep_attention: tried.most_blocks(len(blocks), keep_attention))
    attempts += deep_attempts(first, unskipped, budget, blocks, seen, most)
    if mixed:
        attempts += mixed_attempts(attempts, unskipped, budget, blocks, seen, most)
    retried: tuple[Trial, ...] = ()
    if skip and all(a.plan.prediction.peak > budget for a in attempts):
        # Out of reach: a skipped level whose earlier peak, moved to this calibration, is lower counts again.
        lowest = min(a.plan.prediction.peak for a in attempts)
        retried = levels_to_retry(skip, lowest, (lambda level: 0) if calibration is None else calibration.offset_for)
        for trial in retried:
            attempt = partition_logged(first, guarded, trial.level, seen)
            if attempt is not None and not isinstance(attempt, Pruned):
                attempts.append(attempt)
        skip = tuple(t for t in skip if t not in retried)
    trials = [trial_of(a) for a in attempts]
    chosen = trials.index(choose_trial(trials, budget))
    attempt = attempts[chosen]
    plan = attempt.plan
    recomputed = recompute_entries(first.saved, first.plan.entries, {t.name for t in attempt.saved}, trials[chosen])
    plan.saved_for_recompute = newly_saved(first.saved, plan.entries)
    plan.entries = plan.entries + recomputed
    plan.recompute_trials, plan.recompute_skipped = tuple(trials), skip
    floor = min(t.peak for t in trials)
    made = note(
        NoteCode.RECOMPUTE, trials=tuple(trials), retried=retried, skipped=skip, floor=floor, pruned=tuple(tried.pruned)
    )
    add_note(attempt, made)
    log.info("offload_pass: %s mode=budget: %s; kept %s", plan.graph_id, made, trials[chosen].level)
    attempt.floor = floor
    return attempt


def within_overhead(state: PassState, ctx: PassContext) -> PassState:
    """mode="auto": ``auto_within_overhead`` under the slowdown the plan allows."""
    if ctx.config.mode != Mode.AUTO:
        return state
    return auto_within_overhead(
        state, lambda request: _attempt(dataclasses.replace(ctx, request=request)), state.plan.overhead_allowed
    )


def _bisect_prefix(first: PassState, run: Attempt, within: Callable[[PassState], bool]) -> PassState:
    """The longest prefix of the selection's greedy order the step simulator
    predicts within the limit, by bisection (no copies always is)."""
    low, high, best = 0, len(first.plan.groups) - 1, None
    while low <= high:
        count = (low + high) // 2
        attempt = run(PlanRequest(max_copies=count))
        if within(attempt):
            best, low = attempt, count + 1
        else:
            high = count - 1
    return best or run(PlanRequest(max_copies=0))


def auto_within_overhead(first: PassState, run: Attempt, limit: float) -> PassState:
    """mode="auto": the selection chooses with its coarse model; the step
    simulator, which every report quotes, has the last word. Where it
    predicts the rewritten step over ``limit``, two candidates: the longest
    prefix of the selection's order it predicts within (``_bisect_prefix``),
    and the selection's choice within a share of the limit
    (``SELECT_WITHIN_SHARES``), where predicted within; the lower predicted
    peak is kept (then the shorter step): otherwise a larger max_overhead
    could free less than a smaller one. ``run(request)``: the attempt passes."""
    def within(attempt: PassState) -> bool:
        return attempt.plan.predicted_overhead <= limit + 1e-12

    if first.plan.baseline is None or within(first) or not first.plan.groups:
        return first
    best = _bisect_prefix(first, run, within)
    facts = {"predicted": first.plan.predicted_overhead, "chosen": len(first.plan.groups),
             "kept": len(best.plan.groups), "kept_overhead": best.plan.predicted_overhead}
    made = note(NoteCode.AUTO_PREFIX, **facts)
    for share in SELECT_WITHIN_SHARES if limit > 0 else ():
        other = run(PlanRequest(select_within=limit * share))
        if not within(other):
            continue
        if other.plan.groups and (other.plan.prediction.peak, other.plan.prediction.step_ms) < (
            best.plan.prediction.peak, best.plan.prediction.step_ms
        ):
            made = note(
                NoteCode.AUTO_WITHIN_SHARE, **facts, within=limit * share, copies=len(other.plan.groups),
                overhead=other.plan.predicted_overhead,
            )
            best = other
        break
    add_note(best, made)
    log.info("offload_pass: %s mode=auto: %s", best.plan.graph_id, made)
    return best


def measured_floor(state: PassState, ctx: PassContext) -> PassState:
    """mode="auto": ``measured_floor_attempt`` with the floor the feedback loop handed the pipeline."""
    if ctx.config.mode != Mode.AUTO:
        return state
    return measured_floor_attempt(state, lambda request: _attempt(dataclasses.replace(ctx, request=request)), ctx.floor)


def measured_floor_attempt(first: PassState, run: Attempt, floor) -> PassState:
    """mode="auto": where a set of copies of this graph ran and measured
    within max_overhead (``floor``: ``feedback.memory.measured_floor``) and
    the selection's choice predicts a higher peak than that set planned
    alike, the set runs instead: its promise was measured kept. A set this
    partition does not offer whole is not run."""
    if floor is None or first.plan.prediction is None or {g.storage for g in first.plan.groups} == floor.storages:
        return first
    forced = run(PlanRequest(forced=floor.storages))
    if {g.storage for g in forced.plan.groups} != floor.storages or forced.plan.prediction is None:
        return first
    if forced.plan.prediction.peak >= first.plan.prediction.peak:
        return first
    made = note(
        NoteCode.MEASURED_FLOOR, copies=len(floor.storages), measured=floor.describe(),
        peak=forced.plan.prediction.peak, chosen=len(first.plan.groups), chosen_peak=first.plan.prediction.peak,
    )
    add_note(forced, made)
    log.info("offload_pass: %s mode=auto: %s", forced.plan.graph_id, made)
    return forced


def budget_check(state: PassState, ctx: PassContext) -> PassState:
    """mode="budget": the plan says so where its predicted peak stays over the budget."""
    check_budget(state.plan, _budget(state, ctx), state.recompute_tried, state.floor)
    return state


SEARCH_PASSES: tuple[Pass, ...] = (
    Pass(PassName.RECOMPUTE, recompute),
    Pass("auto_within_overhead", within_overhead),
    Pass("measured_floor", measured_floor),
    Pass("budget_check", budget_check),
)


def run_pipeline(ctx: PassContext) -> PassState:
    """The whole pipeline: the attempt passes as configured, then ``SEARCH_PASSES``
    (every attempt under the one host memory limit resolved here, every
    partition's min-cuts solved by ``min_cuts.exact_min_cuts``, Python's
    collector held off the objects alive before it: ``gc_pause``)."""
    ctx = with_host_limit(ctx)
    with exact_min_cuts() as cuts, collections_paused():
        state = run_passes(SEARCH_PASSES, _attempt(ctx), ctx)
    log.debug("offload_pass: %s exact min-cuts %d, networkx min-cuts %d", ctx.graph_id, cuts["exact"], cuts["networkx"])
    return state
