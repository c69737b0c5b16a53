"""fronts.py on a tiny Hugging Face Llama planned offline (CPU): every
planner gives its points, ours within its budget wherever its floor is, ours
monotone in the budget, the floor under every point of ours, and the
checkpointing-with-offload point copying exactly the blocks' inputs."""

import pytest

from benchmarks.fronts import PLANNERS, jobs_for, plan_points, plot, table, with_floors
from offload_pass.examples.models import llama_shape

BUDGETS = (0.9, 0.5, 0.1)


@pytest.fixture(scope="module")
def points():
    made: list[dict] = []
    plan_points(
        64, 2, jobs_for(BUDGETS), "h200", lambda seq, layers: llama_shape(seq, layers, 64, 4, 2, 128, 256),
        made.append,
    )
    return with_floors(made)


def _of(points, planner):
    return sorted((p for p in points if p["planner"] == planner), key=lambda p: p["budget"] or 0)


def test_every_planner_has_points(points):
    assert {p["planner"] for p in points} == set(PLANNERS)
    assert {p["graph"] for p in points if "graph" in p} == {"graph 0"}
    assert [p["budget"] for p in _of(points, "ours")] == sorted(BUDGETS)
    assert [p["budget"] for p in _of(points, "pytorch")] == sorted(BUDGETS)
    base = _of(points, "inductor")[0]
    for p in points:
        assert (p["baseline_peak"], p["baseline_step_ms"]) == (base["peak"], base["step_ms"])
    for p in _of(points, "ours"):  # ours' own baseline is the inductor point
        assert (p["own_baseline_peak"], p["own_baseline_step_ms"]) == (base["peak"], base["step_ms"])
    for planner in ("inductor", "pytorch", "full_ac"):
        assert all(p["copies"] == 0 for p in _of(points, planner))


def test_ours_within_budget_where_the_floor_is(points):
    floor = _of(points, "ours_floor")[0]
    for p in _of(points, "ours"):
        budget = p["budget"] * p["baseline_peak"]
        assert p["reached"] == (p["peak"] <= budget)
        if floor["peak"] <= budget:
            assert p["reached"], p


def test_ours_monotone_and_above_the_floor(points):
    ours = _of(points, "ours")
    peaks = [p["peak"] for p in ours]  # budgets ascending
    assert peaks == sorted(peaks), peaks
    floor = _of(points, "ours_floor")[0]
    assert all(floor["peak"] <= p for p in peaks)


def test_full_ac_offload_copies_exactly_the_block_inputs(points):
    ac, off = _of(points, "full_ac")[0], _of(points, "full_ac_offload")[0]
    assert ac["level"] == off["level"] == "last 2 of 2 blocks recomputed (all)"
    assert off["block_inputs"] == off["copies"] > 0 and off["block_inputs_not_copied"] == []
    assert off["offloaded_bytes"] == off["block_input_bytes"]
    assert off["peak"] <= ac["peak"]


def test_ours_at_checkpointings_peak_takes_that_peak_as_its_budget(points):
    (at,), (off,) = _of(points, "ours_at_ckpt"), _of(points, "full_ac_offload")
    floor = _of(points, "ours_floor")[0]
    assert at["budget_bytes"] == off["peak"]
    assert at["reached"] == (at["peak"] <= off["peak"])
    assert at["reached"] or floor["peak"] > off["peak"], (at, floor)


def test_a_resumed_run_plans_checkpointing_again_before_ours_at_its_peak(points):
    from benchmarks.fronts import _todo

    held = [p for p in points if p["planner"] != "ours_at_ckpt"]
    todo = _todo(jobs_for(BUDGETS), held, 64, 2, "h200")
    assert [j.planner for j in todo] == ["full_ac_offload", "ours_at_ckpt"]
    assert _todo(jobs_for(BUDGETS), points, 64, 2, "h200") == []


def test_table_and_plot(points, tmp_path):
    assert len(table(points).splitlines()) == len(points) + 1
    written = plot(points, str(tmp_path))
    assert [p.rsplit("/", 1)[1] for p in written] == ["fronts_seq64.png"]
