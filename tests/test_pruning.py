"""mode="budget"'s search prunes partitions that cannot be kept, and keeps the plan it kept without.

Facts able to fail:
- a block cut's bound before partitioning (``planning.cut_bound``) never
  stands above the step its partition predicts without offload, on every
  cut of two shapes, and covers most of what the cut adds to the first
  partition's step (a bound of the first step alone would prune nothing);
- the search with pruning keeps the same plan, entry by entry and in its
  predicted peak and step, as the search planning every partition, and
  prunes something on the shapes drawn (block cuts not partitioned, levels
  not planned); disabled by name, nothing is pruned;
- ``attempts.Tried``: nothing is pruned before a partition reaches the
  budget; a cut over its bound is never run; an attempt stopped by the
  ``prune`` pass is recorded with its own step.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from offload_pass import OffloadConfig
from offload_pass.enums import NoteCode
from offload_pass.examples.models import llama3_8b_shape, llama_shape
from offload_pass.offline import plan_offline
from offload_pass.pipeline import search
from offload_pass.pipeline.attempts import Tried
from offload_pass.pipeline.passes import PlanRequest
from offload_pass.planning.blocks import BlockCut, find_blocks
from offload_pass.planning.cut_bound import cut_step_bound
from offload_pass.planning.trial import Pruned

pytestmark = pytest.mark.xdist_group("deep_budgets")


def _tiny():
    return llama_shape(512, 3, 128, 4, 2, 384, 512, 1)


def _eight_b():
    return llama3_8b_shape(seq=65536, layers=3)


def _cuts_checked(monkeypatch) -> list:
    """Once the first attempt is planned (inside the compile, its fake
    tensors live), every block cut partitioned and planned without pruning:
    (cut, its bound, its own step without offload, its predicted step, the
    first partition's step)."""
    found: list = []
    run_attempt = search.run_attempt

    def checking(ctx):
        state = run_attempt(ctx)
        if ctx.request != PlanRequest() or found:
            return state
        graph = ctx.joint.graph
        of = len(find_blocks(graph))
        for keep_attention in (False, True):
            for count in range(1, of + 1):
                cut = BlockCut(count, of, keep_attention)
                bound = cut_step_bound(
                    graph, find_blocks(graph), cut, ctx.kwargs["num_fwd_outputs"], state.times,
                    state.baseline.between_ms,
                )
                made = run_attempt(dataclasses.replace(ctx, request=PlanRequest(level=cut), reference=state.plan.baseline))
                found.append((cut, bound, made.baseline.step_ms, made.plan.prediction.step_ms, state.baseline.step_ms))
        return state

    monkeypatch.setattr(search, "run_attempt", checking)
    return found


def _plan(shape, config):
    model, inputs = shape()
    if isinstance(inputs, dict):
        return plan_offline(model, kwargs=inputs, config=config, device_profile="h200")
    return plan_offline(model, (), inputs, config=config, device_profile="h200")


@pytest.mark.parametrize(
    "shape, covers", [(_tiny, None), (_eight_b, 0.5)], ids=["tiny_llama", "llama3_8b_3_layers_64k"]
)
def test_a_cut_never_runs_faster_than_its_bound(monkeypatch, shape, covers):
    found = _cuts_checked(monkeypatch)
    _plan(shape, OffloadConfig(mode="budget", memory_budget=0.5, disabled_passes=("recompute",)))
    assert len(found) == 6
    for cut, bound, own, predicted, start in found:
        assert bound <= own + 1e-6, (cut, bound, own)
        assert predicted >= own - 1e-6, (cut, predicted, own)  # offload adds to a partition's step
    if covers is None:
        return
    # Where kernels dominate the step (the 8B shape), the bound grows with
    # the blocks a cut recomputes by most of what its step grows by, and the
    # full cut's stands above the first partition's step.
    by_cut = {(cut.count, cut.keep_attention): (bound, own) for cut, bound, own, _, _ in found}
    for keep_attention in (False, True):
        one = by_cut[(1, keep_attention)]
        for count in (2, 3):
            bound, own = by_cut[(count, keep_attention)]
            assert bound - one[0] >= covers * (own - one[1]), (count, keep_attention, by_cut)
    assert by_cut[(3, False)][0] > found[0][4], (by_cut, found[0][4])


def _facts(plan):
    return (
        str(plan.recompute_level), plan.prediction.peak, plan.prediction.step_ms,
        [(e.name, str(e.decision), e.reason) for e in plan.entries],
    )


def _pruned(plan) -> tuple:
    (made,) = [n for n in plan.notes if n.code == NoteCode.RECOMPUTE]
    return made["pruned"]


@pytest.mark.parametrize(
    "shape, budget, prunes",
    [(_tiny, 0.5, False), (_tiny, 0.7, True), (_eight_b, 0.7, True)],
    ids=["tiny_0.5", "tiny_0.7", "8b_0.7"],
)
def test_pruning_keeps_the_plan_kept_without_it(shape, budget, prunes):
    plans = {}
    for disabled in ((), ("prune",)):
        made = _plan(shape, OffloadConfig(mode="budget", memory_budget=budget, disabled_passes=disabled))
        (plans[disabled],) = made.plans
    pruned, planned = plans[()], plans[("prune",)]
    assert _facts(pruned) == _facts(planned)
    assert _pruned(planned) == ()
    made = len(pruned.recompute_trials) + sum(p.made for p in _pruned(pruned))  # the partitions made
    assert made <= len(planned.recompute_trials)
    for p in _pruned(pruned):
        assert p.bound_ms > p.beat_ms and p.describe() in pruned.selection
    assert bool(_pruned(pruned)) == prunes, _pruned(pruned)  # 0.7 prunes on both shapes


def _attempt(step_ms, peak, slower_than=None, own_ms=None):
    prediction = SimpleNamespace(step_ms=step_ms, peak=peak)
    return SimpleNamespace(
        plan=SimpleNamespace(prediction=prediction), slower_than=slower_than,
        baseline=SimpleNamespace(step_ms=own_ms if own_ms is not None else step_ms),
    )


def test_nothing_is_pruned_before_a_partition_reaches_the_budget_and_a_cut_over_its_bound_is_not_run():
    asked = []

    def run(request, seen):
        asked.append((str(request.level), request.beat_ms))
        if request.level == 0.5:
            return _attempt(0.0, 0, slower_than=request.beat_ms, own_ms=12.0)  # stopped by the prune pass
        return _attempt(9.0, 90)

    tried = Tried(budget=100, attempts=[_attempt(10.0, 120)], bound=lambda cut: 6.0 + cut.count)
    guarded = tried.guard(run)
    # Nothing within the budget yet: the deepest cut runs, with no step to beat.
    made = guarded(PlanRequest(level=BlockCut(4, 4)), set())
    assert asked == [("last 4 of 4 blocks recomputed (all)", None)] and tried.attempts[-1] is made
    # Now 9.0 ms is within it: a cut bounded at 10.0 ms is not run; one at 9.0 ms (not above) is, told to beat 9.0.
    assert guarded(PlanRequest(level=BlockCut(4, 4, True)), set()) == Pruned(BlockCut(4, 4, True), 10.0, 9.0, False)
    guarded(PlanRequest(level=BlockCut(3, 4)), set())
    assert asked[1:] == [("last 3 of 4 blocks recomputed (all)", 9.0)]
    # A level stopped by the prune pass is recorded with its own step, and not as an attempt.
    assert guarded(PlanRequest(level=0.5), set()) == Pruned(0.5, 12.0, 9.0, True)
    assert len(tried.attempts) == 3 and len(tried.pruned) == 2
    # The most blocks worth a cut: bound 6 + count stays within 9.0 up to 3 of them.
    assert tried.most_blocks(4, False) == 3 and Tried(budget=100, attempts=[_attempt(10.0, 120)]).most_blocks(4, True) == 4
    # Disabled: nothing pruned, no step to beat.
    off = Tried(budget=100, attempts=[_attempt(9.0, 90)], bound=lambda cut: 100.0, prune=False)
    asked.clear()
    off.guard(run)(PlanRequest(level=BlockCut(4, 4)), set())
    assert asked == [("last 4 of 4 blocks recomputed (all)", None)] and not off.pruned
