"""The benchmark's paired timing (``bench_offload.py --paired``): which
blocks run in which order, and that a variant's slowdown against the
reference blocks around it survives a device whose speed drifts, where the
round-robin medians do not. Pure Python: fake steps on a fake clock."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest

from benchmarks.bench_offload import (
    interleave, interleave_paired, interleave_seconds, main, next_variant_fits, paired_ratios, paired_schedule,
    rounds_that_fit, steps_until_settled,
)


def test_every_other_variant_sits_between_two_reference_blocks_and_rounds_alternate():
    assert paired_schedule(3, 2) == [0, 1, 0, 2, 0, 2, 0, 1, 0]
    assert paired_schedule(2, 3) == [0, 1, 0, 1, 0, 1, 0]


@pytest.mark.parametrize("variants, rounds", [(1, 3), (3, 0)])
def test_a_schedule_without_a_pair_is_refused_naming_what_it_got(variants, rounds):
    with pytest.raises(ValueError, match=f"got {variants} variants, {rounds} rounds"):
        paired_schedule(variants, rounds)


def test_each_block_is_divided_by_the_mean_of_its_neighbours():
    blocks = [(0, 10.0), (1, 12.0), (0, 14.0), (2, 14.0), (0, 14.0)]
    assert paired_ratios(blocks) == {1: [1.0], 2: [1.0]}


def test_a_block_without_a_reference_on_each_side_is_refused():
    with pytest.raises(ValueError, match="block 1 .variant 1. is not between two reference blocks"):
        paired_ratios([(0, 1.0), (1, 1.0), (2, 1.0), (0, 1.0)])


class _DriftingDevice:
    """Steps whose time is the variant's own times a speed that falls
    linearly with every step the device has run (a clock that drifts)."""

    def __init__(self, own_ms: list[float], drift_per_step: float) -> None:
        self.own_ms, self.drift, self.steps = own_ms, drift_per_step, 0

    def _step(self, variant: int) -> float:
        self.steps += 1
        return self.own_ms[variant] * (1 + self.drift * self.steps)

    def kept(self) -> list[tuple[dict, object, object]]:
        def timed(v):
            def step():
                t = self._step(v)
                return t, t / 2, 1.0, t + 1.0
            return step

        def unsynced(v):
            return lambda: statistics.mean(self._step(v) for _ in range(4))

        fields = ("step_ms", "forward_ms", "backward_ms", "host_forward_ms", "iteration_ms", "unsynced_step_ms")
        return [({k: 0.0 for k in fields}, timed(v), unsynced(v)) for v in range(len(self.own_ms))]


def test_paired_slowdowns_are_the_variants_own_on_a_drifting_device_where_round_robin_is_off():
    own = [30.0, 30.3, 33.0, 30.0]  # the reference, +1 %, +10 %, and a control (another plain compile)
    device = _DriftingDevice(own, drift_per_step=1e-3)
    kept = device.kept()
    interleave_paired(kept, rounds=3, steps=4, settle=2)
    for (result, _, _), ms in zip(kept[1:], own[1:]):
        assert result["paired_slowdown"] == pytest.approx(ms / own[0], rel=1e-3)
        assert result["paired_unsynced_slowdown"] == pytest.approx(ms / own[0], rel=1e-3)
        assert len(result["paired_rounds"]) == 3
    blocks = kept[0][0]["paired_blocks"]
    assert [b["variant"] for b in blocks] == paired_schedule(4, 3)
    assert all(len(b["settle_ms"]) == 2 and len(b["sync_ms"]) == 4 for b in blocks)

    # The same device timed round-robin: the control reads several percent off plain Inductor.
    device = _DriftingDevice(own, drift_per_step=1e-3)
    kept = device.kept()
    interleave(kept, rounds=3, steps=4)
    control = kept[3][0]["step_ms"] / kept[0][0]["step_ms"]
    assert abs(control - 1) > 0.02


@pytest.mark.parametrize(
    "argv",
    [
        ["--paired", "--interleave", "2", "--variants", "offload_pass,inductor"],
        ["--paired", "--variants", "inductor,offload_pass"],
        ["--paired", "--interleave", "2", "--variants", "inductor"],
    ],
)
def test_paired_without_plain_inductor_first_rounds_or_another_variant_is_refused(monkeypatch, capsys, argv):
    monkeypatch.setattr("sys.argv", ["bench_offload.py", *argv])
    with pytest.raises(SystemExit) as exit:
        main()
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "--paired times every variant against the first, which must be inductor" in err
    assert f"got --interleave {argv[argv.index('--interleave') + 1] if '--interleave' in argv else 0}" in err


def test_a_deadline_that_is_not_a_positive_number_of_seconds_is_refused(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["bench_offload.py", "--deadline", "0"])
    with pytest.raises(SystemExit) as exit:
        main()
    assert exit.value.code == 2
    assert "--deadline must be a positive number of seconds, got 0" in capsys.readouterr().err


def _deadline_args(interleave=3, paired=True):
    return SimpleNamespace(interleave=interleave, steps=10, settle=10, paired=paired)


def test_the_rounds_forecast_counts_every_block_of_the_schedule():
    # Paired, one round over two others: blocks 0, 1, 0, 2, 0, each 10 settling + 10 + 10 steps.
    assert interleave_seconds([20.0, 30.0, 40.0], 1, 10, 10, paired=True) == pytest.approx(30 * (3 * 20 + 30 + 40) / 1e3)
    # Round-robin: every variant once a round, 10 + 10 steps, no settling.
    assert interleave_seconds([20.0, 30.0], 3, 10, 10, paired=False) == pytest.approx(3 * 20 * 50 / 1e3)
    assert interleave_seconds([20.0], 3, 10, 10, paired=True) == 0.0  # nothing to pair with
    assert interleave_seconds([20.0, 30.0], 0, 10, 10, paired=True) == 0.0


def test_a_variant_is_begun_only_where_the_longest_so_far_and_the_rounds_after_it_fit():
    args = _deadline_args()
    assert next_variant_fits(0.0, [], [], args)  # the first always runs
    # Taken as long as the longest (150 s), iterating as slowly as the slowest (40 ms).
    need = 150.0 + interleave_seconds([30.0, 40.0, 40.0], 3, 10, 10, paired=True)
    assert next_variant_fits(need, [100.0, 150.0], [30.0, 40.0], args)
    assert not next_variant_fits(need - 1.0, [100.0, 150.0], [30.0, 40.0], args)
    # Without --interleave only the variant itself counts.
    assert next_variant_fits(150.0, [100.0, 150.0], [], _deadline_args(interleave=0))


def test_the_rounds_are_cut_to_those_that_fit():
    args, iteration = _deadline_args(interleave=3), [30.0, 40.0]
    one, two = (interleave_seconds(iteration, r, 10, 10, paired=True) for r in (1, 2))
    assert rounds_that_fit(two, iteration, args) == 2
    assert rounds_that_fit(two - 0.1, iteration, args) == 1
    assert rounds_that_fit(one - 0.1, iteration, args) == 0
    assert rounds_that_fit(1e9, iteration, args) == 3  # never more than asked for


class _AutoBackend:
    """A backend whose steps follow a script: "plan" (the plan ran alone),
    "plain" (plain Inductor's graph ran in its place), "new" (a new plan)."""

    def __init__(self, script: list[str]) -> None:
        self.script, self.plans, self._last = list(script), ["plan 0"], None

    def step(self) -> None:
        what = self.script.pop(0) if self.script else "plan"
        if what == "new":
            self.plans.append(f"plan {len(self.plans)}")
        self._last = SimpleNamespace(plain_inductor=(("plan", 1),) if what == "plain" else ())

    def last_step(self):
        return self._last


def test_timing_waits_until_auto_ran_its_plan_alone_for_the_quiet_steps():
    # Plain Inductor's turns, then a re-plan (its own turns after), then quiet.
    script = ["plan", "plain", "plain", "plan", "new", "plan", "plan", "plain", "plan"]
    backend = _AutoBackend(script)
    steps = steps_until_settled(backend.step, backend, limit=100, quiet=3)
    assert steps == 8 + 3  # quiet from the step after the last plain one
    assert backend.script == []


def test_auto_still_measuring_at_the_limit_is_an_error_not_a_timing():
    backend = _AutoBackend(["plain", "plan"] * 50)
    with pytest.raises(RuntimeError, match="still measuring its plans after 20 steps"):
        steps_until_settled(backend.step, backend, limit=20, quiet=3)
