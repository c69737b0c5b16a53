"""A plan's prediction against calls measured on the device.

Takes: a ``StepPrediction`` (the step simulator's) and ``MeasuredCall``s
(``feedback/measure.py``). Gives: ``median_call`` (the one call a check is
made against), ``PredictionCheck`` (the errors of the step, the stalls on
copies and the peak, and mode="auto"'s slowdown over plain Inductor's graph
measured beside the plan), ``pair_ratios``, ``predicts_alike`` and
``forward_speed``. Pure functions over plain data.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Optional, Sequence

from offload_pass.planning.step_model import StepPrediction
from offload_pass.units import format_bytes

from offload_pass.planning.calibration import REPLAN_TOLERANCE, STALL_TOLERANCE

__all__ = [
    "PHASE_SPEED_TOLERANCE", "REPLAN_TOLERANCE", "STALL_TOLERANCE", "MeasuredCall", "PredictionCheck",
    "check_prediction", "forward_speed", "median_call", "pair_ratios", "predicts_alike",
]

# How much slower (against the simulator's times) the forward may run than
# the backward and still be the device's own speed; past it, the forward was
# slowed by its runtime ops (the device idling for the host issuing them).
PHASE_SPEED_TOLERANCE = 0.03


@dataclasses.dataclass(frozen=True)
class MeasuredCall:
    """One call of a compiled forward and its backward, on the device."""

    call: int  # which call of the compiled graph (1 = the first)
    forward_ms: float  # the forward on the compute stream, its stalls included
    backward_ms: float
    forward_wait_ms: float  # the compute stream stalled at releases (copies landing)
    backward_wait_ms: float  # ... at wait_reloads (reloads landing)
    peak: Optional[int]  # bytes above what was allocated at the forward's start; None: not measured
    peak_note: str = ""  # why the peak (and between_ms) was not measured
    # From the forward's end to the backward's start (the host's work in
    # between); measured with the peak only: where other graphs run, they fill it.
    between_ms: float = 0.0
    # The host's wall time from the forward's call to its return, and of the backward.
    host_forward_ms: Optional[float] = None
    host_backward_ms: Optional[float] = None
    # From the previous call's backward end to this forward's start: the
    # step's time outside this graph, which no plan of it changes; None: not measured.
    outside_ms: Optional[float] = None
    # The calls this one was chosen from (``median_call``) and each one's work, ms; empty: itself alone.
    of_calls: tuple[int, ...] = ()
    of_work_ms: tuple[float, ...] = ()

    @property
    def step_ms(self) -> float:
        return self.forward_ms + self.between_ms + self.backward_ms

    @property
    def work_ms(self) -> float:
        """The forward and backward on the device, without the host's time between them."""
        return self.step_ms - self.between_ms

    def describe_call(self) -> str:
        if len(self.of_calls) < 2:
            return f"call {self.call}"
        return f"call {self.call} (the median of calls {', '.join(map(str, self.of_calls))})"

    def describe_spread(self) -> str:
        """What each of the calls chosen from took ("": itself alone)."""
        if len(self.of_work_ms) < 2:
            return ""
        return f"; forward and backward of calls {', '.join(map(str, self.of_calls))}: " + ", ".join(
            f"{t:.2f}" for t in self.of_work_ms
        ) + " ms"


def median_call(calls: Sequence[MeasuredCall]) -> MeasuredCall:
    """The call whose forward and backward took the median time of
    ``calls`` (of an even number, the faster of the middle two), with the
    highest peak any of them measured. The median, not the fastest: the
    step a user sees is a typical one. A peak is kept at its highest (memory
    the device reached once it can reach again); the time between forward
    and backward comes from the calls that measured a peak, the time outside
    the graph is the median of the calls that measured one."""
    if not calls:
        raise ValueError("median_call: no measured call")

    def middle(of: Sequence[MeasuredCall]) -> MeasuredCall:
        return sorted(of, key=lambda m: m.work_ms)[(len(of) - 1) // 2]

    chosen = middle(calls)
    spread = {"of_calls": tuple(m.call for m in calls), "of_work_ms": tuple(m.work_ms for m in calls)}
    outside = [m.outside_ms for m in calls if m.outside_ms is not None]
    spread["outside_ms"] = statistics.median(outside) if outside else None  # type: ignore[assignment]
    alone = [m for m in calls if m.peak is not None]
    if not alone:
        return dataclasses.replace(chosen, **spread)  # type: ignore[arg-type]
    return dataclasses.replace(
        chosen, peak=max(m.peak for m in alone), peak_note="",  # type: ignore[type-var]
        between_ms=middle(alone).between_ms, **spread,  # type: ignore[arg-type]
    )


def _error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured if measured else 0.0


@dataclasses.dataclass(frozen=True)
class PredictionCheck:
    """A prediction against the measured call it predicted."""

    predicted: StepPrediction
    measured: MeasuredCall
    # mode="auto": plain Inductor's graph measured in turns with the plan; None: not measured.
    plain: Optional[MeasuredCall] = None
    # ... and each pair of calls' work, the plan's over plain Inductor's (``pair_ratios``); empty: not paired.
    pair_ratios: tuple[float, ...] = ()

    @property
    def measured_overhead(self) -> Optional[float]:
        """The plan's slowdown over plain Inductor's graph, both measured
        (0.02 = 2 %): the median over the pairs of calls, else the median
        calls' ratio; None without ``plain``."""
        if self.plain is None or self.plain.work_ms <= 0:
            return None
        if self.pair_ratios:
            return statistics.median(self.pair_ratios) - 1
        return self.measured.work_ms / self.plain.work_ms - 1

    @property
    def peak(self) -> int:
        """The plan's peak: measured where it was, else predicted."""
        return self.measured.peak if self.measured.peak is not None else self.predicted.peak

    @property
    def plain_work_ms(self) -> Optional[float]:
        """Plain Inductor's forward and backward as this check measured the
        plan against it (what a re-plan spends ``max_overhead`` of); None without ``plain``."""
        overhead = self.measured_overhead
        if overhead is None:
            return None
        return self.measured.work_ms / (1 + overhead) if self.pair_ratios else self.plain.work_ms  # type: ignore[union-attr]

    @property
    def step_error(self) -> float:
        """(predicted - measured) / measured time of the graphs' work (the
        host's time between forward and backward left out of both sides)."""
        return _error(
            self.predicted.step_ms - self.predicted.between_ms, self.measured.step_ms - self.measured.between_ms
        )

    @property
    def step_as_run_ms(self) -> Optional[float]:
        """The step as the loop that measured it ran it, predicted."""
        return self.as_run(self.predicted)

    def as_run(self, prediction: StepPrediction) -> Optional[float]:
        """``prediction``'s work plus the time the measured call spent
        outside it (between forward and backward, and between steps); None
        where the time outside was not measured."""
        m = self.measured
        if m.outside_ms is None:
            return None
        return prediction.step_ms - prediction.between_ms + m.between_ms + m.outside_ms

    @property
    def stall_error(self) -> float:
        """(predicted - measured) stalls on copies, both phases, as a share of the measured work."""
        work = self.measured.step_ms - self.measured.between_ms
        predicted = self.predicted.forward_wait_ms + self.predicted.backward_wait_ms
        measured = self.measured.forward_wait_ms + self.measured.backward_wait_ms
        return (predicted - measured) / work if work else 0.0

    @property
    def peak_error(self) -> Optional[float]:
        if self.measured.peak is None:
            return None
        return _error(self.predicted.peak, self.measured.peak)

    def within(self) -> bool:
        """Step and peak within ``REPLAN_TOLERANCE``, stalls within ``STALL_TOLERANCE``."""
        errors = [self.step_error] + ([] if self.peak_error is None else [self.peak_error])
        return all(abs(e) <= REPLAN_TOLERANCE for e in errors) and abs(self.stall_error) <= STALL_TOLERANCE

    def describe(self) -> str:
        m, p = self.measured, self.predicted
        return (
            f"measured on {m.describe_call()}: step {m.step_ms:.2f} ms (forward {m.forward_ms:.2f}{self._between()}, "
            f"backward {m.backward_ms:.2f}; stalled on copies {m.forward_wait_ms:.2f} + {m.backward_wait_ms:.2f} ms"
            f"{self._host()}), predicted {p.step_ms:.2f} ms (forward and backward {self.step_error:+.1%}; stalls "
            f"{p.forward_wait_ms:.2f} + {p.backward_wait_ms:.2f} ms, {self.stall_error:+.1%} of the step"
            f"{self._idle()}); {self._peak()}{self._outside()}{m.describe_spread()}{self._plain()}"
        )

    def _peak(self) -> str:
        m, p = self.measured, self.predicted
        if m.peak is None:
            return "peak not measured" + (f" ({m.peak_note})" if m.peak_note else "")
        return f"peak {format_bytes(m.peak)}, predicted {format_bytes(p.peak)} ({self.peak_error:+.1%})"

    def _between(self) -> str:
        return f", between {self.measured.between_ms:.2f}" if self.measured.between_ms else ""

    def _idle(self) -> str:
        p = self.predicted
        if round(p.forward_idle_ms + p.backward_idle_ms, 2):
            return f"; idle for the host {p.forward_idle_ms:.2f} + {p.backward_idle_ms:.2f} ms"
        return ""

    def _host(self) -> str:
        m = self.measured
        host = "" if m.host_forward_ms is None else f"; the host issued the forward in {m.host_forward_ms:.2f} ms"
        if m.host_forward_ms is not None and m.host_backward_ms is not None:
            host += f", the backward in {m.host_backward_ms:.2f}"
        return host

    def _outside(self) -> str:
        as_run = self.step_as_run_ms
        if as_run is None:
            return ""
        return (
            f"; outside the graph {self.measured.outside_ms:.2f} ms between steps (measured), so the step as the "
            f"loop ran it {as_run:.2f} ms predicted"
        )

    def _plain(self) -> str:
        if self.plain is None:
            return ""
        pairs = "" if not self.pair_ratios else f", the median of {len(self.pair_ratios)} pairs of calls: " + (
            ", ".join(f"{r - 1:+.1%}" for r in self.pair_ratios)
        )
        return (
            f"; plain Inductor's graph measured on {self.plain.describe_call()}: forward and backward "
            f"{self.plain.work_ms:.2f} ms, this plan's {self.measured.work_ms:.2f} ({self.measured_overhead:+.1%}"
            f"{pairs})"
        )


def check_prediction(prediction: StepPrediction, measured: MeasuredCall) -> PredictionCheck:
    return PredictionCheck(prediction, measured)


def pair_ratios(plan: Sequence[MeasuredCall], plain: Sequence[MeasuredCall]) -> tuple[float, ...]:
    """The plan's calls against plain Inductor's, taken in turns by blocks
    (the k-th measured of each ran in adjacent blocks,
    ``schedule.runs_plain_in_turn``): each pair's work, the plan's over
    plain's. Their median is the plan's measured slowdown: a pair runs a few
    calls apart, where calls further apart ran on another clock."""
    if len(plan) != len(plain):
        raise ValueError(f"pair_ratios: {len(plan)} calls of the plan against {len(plain)} of plain Inductor's")
    return tuple(p.work_ms / q.work_ms for p, q in zip(plan, plain) if q.work_ms > 0)


def forward_speed(forward: float, backward: float) -> float:
    """The device's speed in the forward (a scale on the simulator's node
    times): the forward's measured ``forward``, at most
    ``PHASE_SPEED_TOLERANCE`` over the backward's ``backward`` (0: the forward's own)."""
    return min(forward, backward * (1 + PHASE_SPEED_TOLERANCE)) if backward > 0 else forward


def predicts_alike(a: StepPrediction, b: StepPrediction, rel: float = 1e-3) -> bool:
    """Whether two predictions of one plan agree (step, stalls and peak
    within ``rel``): a calibration that predicts the plan measured as its
    own did would plan it the same."""
    pairs = (
        (a.step_ms - a.between_ms, b.step_ms - b.between_ms),
        (a.forward_wait_ms + a.backward_wait_ms, b.forward_wait_ms + b.backward_wait_ms),
        (float(a.peak), float(b.peak)),
    )
    scale = max(a.step_ms - a.between_ms, 1e-9)
    return all(
        math.isclose(x, y, rel_tol=rel, abs_tol=rel * scale if i < 2 else 0.0) for i, (x, y) in enumerate(pairs)
    )
