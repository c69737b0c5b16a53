"""mode="budget"'s search shares PyTorch's min-cuts between its partitions, and plans exactly as without.

Facts able to fail: the search with shared cuts solves fewer than it asks
for and keeps the same plan, trial by trial, as the search solving every
cut; a block cut's tags make other cuts (never answered from an untagged
one); PyTorch's function is put back after the search, also on an error.
"""

from __future__ import annotations

import logging
import re

import pytest
from torch._functorch import partitioners

from offload_pass import OffloadConfig
from offload_pass.examples.models import llama_shape
from offload_pass.offline import plan_offline
from offload_pass.pipeline import min_cuts

pytestmark = pytest.mark.xdist_group("deep_budgets")


def _plan(caplog):
    model, inputs = llama_shape(512, 3, 128, 4, 2, 384, 512, 1)
    with caplog.at_level(logging.DEBUG, logger="offload_pass"):
        made = plan_offline(model, kwargs=inputs, config=OffloadConfig(mode="budget", memory_budget=0.3))
    (plan,) = made.plans
    counts = [r.getMessage() for r in caplog.records if "min-cuts solved" in r.getMessage()]
    caplog.clear()
    return plan, counts


def _facts(plan):
    return (
        [(str(t.level), t.step_ms, t.peak, t.copied_bytes) for t in plan.recompute_trials],
        str(plan.recompute_level), plan.prediction.peak, plan.prediction.step_ms,
        [(e.name, str(e.decision), e.reason) for e in plan.entries],
    )


def test_shared_min_cuts_plan_what_every_cut_solved_plans(caplog, monkeypatch):
    shared, counts = _plan(caplog)
    (line,) = counts
    solved, reused = (int(v) for v in re.search(r"solved (\d+), shared (\d+)", line).groups())
    assert reused > 0 and solved > 0, line
    assert any("blocks recomputed" in str(t.level) for t in shared.recompute_trials)
    monkeypatch.setattr(min_cuts, "_shareable", lambda: False)
    alone, _ = _plan(caplog)
    assert _facts(shared) == _facts(alone)


def test_pytorchs_solver_is_put_back_after_the_search_and_on_an_error():
    original = partitioners.solve_min_cut
    with min_cuts.shared_min_cuts():
        assert partitioners.solve_min_cut is not original
    assert partitioners.solve_min_cut is original
    with pytest.raises(RuntimeError, match="inside"):
        with min_cuts.shared_min_cuts():
            raise RuntimeError("inside")
    assert partitioners.solve_min_cut is original


def test_another_threads_partition_solves_its_own_cuts():
    import threading

    seen = []
    original = partitioners.solve_min_cut

    def spy(joint_graph, node_info, min_cut_options, dont_ban=None):
        seen.append(threading.get_ident())
        return "solved"

    partitioners.solve_min_cut = spy
    try:
        with min_cuts.shared_min_cuts() as counts:
            assert partitioners.solve_min_cut is not spy
            other = threading.Thread(target=lambda: partitioners.solve_min_cut(None, None, None, None))
            other.start()
            other.join()
        assert seen == [other.ident] and counts == {"solved": 0, "shared": 0}
        assert partitioners.solve_min_cut is spy
    finally:
        partitioners.solve_min_cut = original
