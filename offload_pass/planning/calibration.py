"""Stage 3g, calibration: the step simulator held to what the device measured.

Takes: a plan's ``StepPrediction`` and ``MeasuredCall``s, calls of the
compiled forward and its backward timed on the device (``runtime/measure.py``:
each phase on the compute stream, the time it stalled on copies, the peak
above what was allocated when the forward started). Gives:

- ``median_call``: the one measured call a check is made against, out of
  several (the median: what the step a user sees takes);
- ``check_prediction``: a ``PredictionCheck``, the errors of the step and
  peak the simulator predicted, and whether they are within
  ``REPLAN_TOLERANCE`` (issue #19's 3 %), and of the time the compute
  stream stalled on copies, within ``STALL_TOLERANCE`` of the step (what a
  plan costs over no offload is its stalls: mode="auto" keeps them within
  ``max_overhead``);
- ``fit_calibration``: a ``Calibration`` that makes the simulator reproduce
  the measurement: a scale per phase on the node times (compute measured,
  waits aside), a scale per phase on the host clock's times (the host's
  measured time, as far as the device did not idle for it), a scale per
  direction on the copy bandwidth (found by bisection so that the
  simulated stall matches the measured one), and the bytes the memory
  timeline missed at the peak. The backend plans the graph
  once more under it (``backend.py``);
- ``replan_reason``: whether a measured plan is planned once more, and why:
  a prediction off by more than its tolerance (the first re-plan
  only), or, under mode="budget", a measured peak over the budget the plan
  predicted it within (once), or, under mode="auto", a measured step over
  ``max_overhead`` (``overhead_as_measured``: against plain Inductor's
  graph measured beside the plan, ``PredictionCheck.plain``, where it was;
  once), or a re-plan's own peak off its prediction (the second re-plan
  only); ``overhead_allowed``: the slowdown over the predicted step without
  offload that a re-plan's selection may spend. A
  graph is planned at most twice more;
- ``choose_fallback``: under mode="auto", what a graph whose last plan
  still measured over ``max_overhead`` (+ ``OVERHEAD_NOISE``) runs instead:
  the earlier plan of it measured within that frees the most, else plain
  Inductor's graph (a ``Fallback``); and plain Inductor's graph in place of
  a last plan that frees nothing.

Pure functions over plain data: the simulator is handed in as a callable, so
everything here is testable without a device.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from typing import Callable, Optional, Sequence

from offload_pass.enums import ReplanReason
from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.step_model import NodeTimes, StepPrediction
from offload_pass.units import format_bytes

__all__ = [
    "OVERHEAD_NOISE", "REPLAN_TOLERANCE", "ROOM_MARGIN", "STALL_TOLERANCE", "Calibration", "Fallback", "MeasuredCall",
    "MeasuredSet", "PredictionCheck", "check_prediction", "choose_fallback", "fit_calibration", "measured_floor",
    "median_call", "nothing_to_decide",
    "overhead_allowed", "overhead_as_measured", "pair_ratios", "predicts_alike", "replan_reason", "room_margin",
]

log = logging.getLogger("offload_pass")

# Issue #19: the step time and the peak predicted within 3 % of the measured.
REPLAN_TOLERANCE = 0.03
# The stalls on copies (what a plan adds to the step) predicted within this
# share of the step: issue #19's noise on max_overhead (+1 %). A step
# predicted within 3 % can still hide a stall four times the budget behind
# compute predicted long (HF Llama, mode="auto" 2 % on the H100: step
# -1.1 %, stalls 0.41 ms predicted, 2.39 measured, +7.7 % measured). Below
# it a stall is within the timer's noise: the bandwidth is not fitted to it.
STALL_TOLERANCE = 0.01
# mode="auto": how far over max_overhead a plan may measure against plain
# Inductor's graph before the graph falls back (``choose_fallback``): issue
# #19's noise (+1 %), about what two compiles of plain Inductor measured in
# turns read against each other (the median of adjacent pairs, six runs on
# an H200, 2026-11-27: -1.1 to +1.5 %).
OVERHEAD_NOISE = 0.01
# mode="auto": a plan measured under max_overhead by more than this (the
# larger of twice OVERHEAD_NOISE and a quarter of max_overhead) against
# plain Inductor's graph, where its limit bound its selection and it left
# copies unchosen, is planned once more to spend the rest (``replan_reason``, ``ReplanReason.ROOM``). A plan
# carries its first prediction's error into what it spends: the decoder at
# max_overhead 10 % on the H200 (twentieth session) chose 6 copies
# predicted +9.7 % that measured +5.4 and +7.0 %, where the hand-marked 7
# (attn-but-last) measured +9.0 and +9.8 % synchronized. Twice the noise:
# under 2 %, a plan within the noise of its limit stays.
ROOM_MARGIN = (2 * OVERHEAD_NOISE, 0.25)


def room_margin(max_overhead: float) -> float:
    """How far under ``max_overhead`` a plan measures before it is planned
    again to spend the rest (``ROOM_MARGIN``)."""
    noise, share = ROOM_MARGIN
    return max(noise, share * max_overhead)


# How much slower (against the simulator's times) the forward may run than
# the backward and still be the device's own speed: the decoder's plans
# measured their forward x0.97-x1.03 of their backward (H200, fifteenth
# session). Past it, a forward with runtime ops was slowed by them (the
# device idling for the host issuing them: HF Llama, 15 copies, x1.079
# against x0.971), which the step without offload does not pay.
PHASE_SPEED_TOLERANCE = 0.03
# The bandwidth scales the bisection may reach (a copy 8x slower or faster
# than profiled is a wrong profile, not a calibration).
_SCALE_RANGE = (1 / 8, 8.0)


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
    # From the forward's end to the backward's start: the host's work in
    # between (autograd starting the backward), during which copies run on.
    # Measured with the peak only: where other graphs run, they fill it.
    between_ms: float = 0.0
    # The host's wall time from the forward's call to its return (nothing
    # synchronized): near forward_ms, the forward runs as fast as the host
    # launches it, and what it takes past its kernels is the host's.
    host_forward_ms: Optional[float] = None
    host_backward_ms: Optional[float] = None  # ... from the backward's start to its end, on the host
    # From the previous call's backward end to this call's forward start, on
    # the compute stream: the step's time outside this graph (the training
    # loop between steps, Dynamo's guards and the model's Python before the
    # graph, autograd's work after its backward), which no plan of this
    # graph changes and the simulator does not model. Measured with the peak
    # only (where the step runs this graph alone), on a call whose previous
    # call was measured too; None: not measured.
    outside_ms: Optional[float] = None
    # The calls this one was chosen from (``median_call``), and what each
    # one's forward and backward took, in ms; empty: itself alone.
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
    step a user sees is a typical one, and the host's and the device's
    speed vary from call to call (the host's jitter lands in a forward it
    issues barely ahead of the device; an H200's clock follows its load
    under the power cap). The fastest of three measured calls predicted the
    benchmark's median step 1-5 % low even where both ran in one loop
    (HF Llama, calls 6-8, 2026-11-26). Warm-up does not reach the calls
    measured (``compiled_graph.FIRST_MEASURED_CALL``). A peak is kept at its
    highest: memory the device reached once it can reach again. The time
    between forward and backward is measured with the peak only (where the
    step ran this graph alone), so it comes from the median of the calls
    that measured a peak, and the peak's note goes where a peak was
    measured. The time outside the graph is the median of the calls that
    measured one (the first measured call has no measured call before it)."""
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
    # mode="auto": plain Inductor's compile of the same graph, measured on
    # calls taking turns with the plan's (``compiled_graph.py``); None: not measured.
    plain: Optional[MeasuredCall] = None
    # ... and each pair of calls' work (the k-th measured of each graph, in
    # adjacent blocks), the plan's over plain Inductor's (``pair_ratios``);
    # empty: not paired.
    pair_ratios: tuple[float, ...] = ()

    @property
    def measured_overhead(self) -> Optional[float]:
        """The plan's slowdown over plain Inductor's graph, both measured
        (their forward and backward; 0.02 = 2 %): the median over the pairs
        of calls (``pair_ratios``), else the median calls' ratio;
        None without ``plain``."""
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
        plan against it: the plan's median over ``measured_overhead`` (the
        median plain call where the calls were not paired); None without
        ``plain``. What a re-plan spends ``max_overhead`` of."""
        overhead = self.measured_overhead
        if overhead is None:
            return None
        return self.measured.work_ms / (1 + overhead) if self.pair_ratios else self.plain.work_ms  # type: ignore[union-attr]

    @property
    def step_error(self) -> float:
        """(predicted - measured) / measured time of the graphs' work: the
        host's time between forward and backward is left out of both sides
        (a first plan cannot know it; a calibration only carries it over)."""
        return _error(
            self.predicted.step_ms - self.predicted.between_ms, self.measured.step_ms - self.measured.between_ms
        )

    @property
    def step_as_run_ms(self) -> Optional[float]:
        """The step as the loop that measured it ran it, predicted
        (``as_run`` of this prediction)."""
        return self.as_run(self.predicted)

    def as_run(self, prediction: StepPrediction) -> Optional[float]:
        """``prediction``'s step (this plan's, or its graph's without
        offload) as the loop that measured this call runs it: the graphs'
        work as predicted, plus the time the measured call spent outside it
        (between forward and backward, ``MeasuredCall.between_ms``, and
        outside the graph between steps, ``MeasuredCall.outside_ms``:
        measured, not predicted; no plan of this graph changes them). None
        where the time outside was not measured."""
        m = self.measured
        if m.outside_ms is None:
            return None
        return prediction.step_ms - prediction.between_ms + m.between_ms + m.outside_ms

    @property
    def stall_error(self) -> float:
        """(predicted - measured) stalls on copies, both phases, as a share of
        the measured work (``step_error``'s denominator)."""
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
        peak = (
            "peak not measured" + (f" ({m.peak_note})" if m.peak_note else "") if m.peak is None
            else f"peak {format_bytes(m.peak)}, predicted {format_bytes(p.peak)} ({self.peak_error:+.1%})"
        )
        between = f", between {m.between_ms:.2f}" if m.between_ms else ""
        idle = ""
        if round(p.forward_idle_ms + p.backward_idle_ms, 2):
            idle = f"; idle for the host {p.forward_idle_ms:.2f} + {p.backward_idle_ms:.2f} ms"
        host = "" if m.host_forward_ms is None else f"; the host issued the forward in {m.host_forward_ms:.2f} ms"
        if m.host_forward_ms is not None and m.host_backward_ms is not None:
            host += f", the backward in {m.host_backward_ms:.2f}"
        as_run = self.step_as_run_ms
        outside = "" if as_run is None else (
            f"; outside the graph {m.outside_ms:.2f} ms between steps (measured), so the step as the loop ran it "
            f"{as_run:.2f} ms predicted"
        )
        pairs = "" if not self.pair_ratios else f", the median of {len(self.pair_ratios)} pairs of calls: " + (
            ", ".join(f"{r - 1:+.1%}" for r in self.pair_ratios)
        )
        plain = "" if self.plain is None else (
            f"; plain Inductor's graph measured on {self.plain.describe_call()}: forward and backward "
            f"{self.plain.work_ms:.2f} ms, this plan's {m.work_ms:.2f} ({self.measured_overhead:+.1%}{pairs})"
        )
        return (
            f"measured on {m.describe_call()}: step {m.step_ms:.2f} ms (forward {m.forward_ms:.2f}{between}, backward "
            f"{m.backward_ms:.2f}; stalled on copies {m.forward_wait_ms:.2f} + {m.backward_wait_ms:.2f} ms{host}), "
            f"predicted {p.step_ms:.2f} ms (forward and backward {self.step_error:+.1%}; stalls "
            f"{p.forward_wait_ms:.2f} + {p.backward_wait_ms:.2f} ms, {self.stall_error:+.1%} of the step{idle}); {peak}"
            f"{outside}{m.describe_spread()}{plain}"
        )


def check_prediction(prediction: StepPrediction, measured: MeasuredCall) -> PredictionCheck:
    return PredictionCheck(prediction, measured)


def pair_ratios(plan: Sequence[MeasuredCall], plain: Sequence[MeasuredCall]) -> tuple[float, ...]:
    """The plan's calls against plain Inductor's, taken in turns by blocks
    (plain, plan, plan, plain, ...: the k-th measured of each ran in
    adjacent blocks, ``compiled_graph.runs_plain_in_turn``): each pair's
    forward and backward, the plan's over plain's. Their median is the
    plan's slowdown measured (``PredictionCheck.measured_overhead``): a
    pair runs a few calls apart, where calls of one graph further apart
    ran on another clock. Two compiles of plain Inductor measured in turns on the H200
    (eighteenth session) took 30.3-35.3 ms a call over twelve calls, the
    early calls slowest; the medians of each graph's six read them
    -0.4, +0.1 and +3.9 % apart, the median pair -1.1, +0.2 and +1.1 %
    (three more runs, paired as they ran: -0.1, +0.7, +1.5 %)."""
    if len(plan) != len(plain):
        raise ValueError(f"pair_ratios: {len(plan)} calls of the plan against {len(plain)} of plain Inductor's")
    return tuple(p.work_ms / q.work_ms for p, q in zip(plan, plain) if q.work_ms > 0)


def nothing_to_decide(candidates: Optional[int], budget: Optional[int]) -> bool:
    """Whether every plan of a graph is the same whatever the prediction:
    no copy candidate (``OffloadPlan.candidates`` 0; None: not counted) and
    no budget to recompute for."""
    return candidates == 0 and budget is None


def _forward_speed(forward: float, backward: float) -> float:
    """The device's speed in the forward (a scale on the simulator's node
    times): the forward's measured ``forward``, at most
    ``PHASE_SPEED_TOLERANCE`` over the backward's ``backward`` (a backward
    not measured, 0: the forward's own)."""
    return min(forward, backward * (1 + PHASE_SPEED_TOLERANCE)) if backward > 0 else forward


def overhead_as_measured(check: PredictionCheck, without_offload: StepPrediction) -> float:
    """The plan's slowdown over no offload (0.02 = 2 %) as measured: over
    plain Inductor's graph measured beside it where it was
    (``PredictionCheck.measured_overhead``). Else its
    measured work (stalls on copies included) over the step without offload
    as predicted at the speeds the device ran the plan's phases at (each
    measured phase, its stalls aside, over the predicted), the forward's at
    most ``PHASE_SPEED_TOLERANCE`` over the backward's (``_forward_speed``).
    The step without offload is not run; one device runs both phases at
    about one speed, so what the measured forward took past that is the
    plan's (the device idling for the host issuing its runtime ops: HF
    Llama, auto 1 % on the H200, 0.8 ms past a prediction within 3 %).
    Both sides are the graphs' work: the host's time between forward and
    backward is left out (``PredictionCheck.step_error``)."""
    if check.measured_overhead is not None:
        return check.measured_overhead
    p, m, w = check.predicted, check.measured, without_offload
    forward, backward = m.forward_ms - m.forward_wait_ms, m.backward_ms - m.backward_wait_ms
    predicted_forward, predicted_backward = p.forward_ms + p.forward_idle_ms, p.backward_ms + p.backward_idle_ms
    backward_speed = backward / predicted_backward if predicted_backward > 0 else 1.0
    forward_speed = forward / predicted_forward if predicted_forward > 0 else 1.0
    base = (
        _forward_speed(forward_speed, backward_speed) * (w.forward_ms + w.forward_idle_ms)
        + backward_speed * (w.backward_ms + w.backward_idle_ms) + w.forward_wait_ms + w.backward_wait_ms
    )
    if base <= 0:
        return 0.0
    return (forward + backward + m.forward_wait_ms + m.backward_wait_ms) / base - 1


def predicts_alike(a: StepPrediction, b: StepPrediction, rel: float = 1e-3) -> bool:
    """Whether two predictions of one plan agree (step, stalls and peak
    within ``rel``): a calibration that predicts the plan measured as its own
    did would plan it the same (a stall no bandwidth explains holds the fit
    at ``_SCALE_RANGE``'s bound, where the plan was calibrated already)."""
    pairs = (
        (a.step_ms - a.between_ms, b.step_ms - b.between_ms),
        (a.forward_wait_ms + a.backward_wait_ms, b.forward_wait_ms + b.backward_wait_ms),
        (float(a.peak), float(b.peak)),
    )
    scale = max(a.step_ms - a.between_ms, 1e-9)
    return all(
        math.isclose(x, y, rel_tol=rel, abs_tol=rel * scale if i < 2 else 0.0) for i, (x, y) in enumerate(pairs)
    )


def replan_reason(
    check: PredictionCheck,
    budget: Optional[int],
    done: Sequence[ReplanReason],
    candidates: Optional[int] = None,
    max_overhead: Optional[float] = None,
    without_offload: Optional[StepPrediction] = None,
    chosen: Optional[int] = None,
    unspent: Optional[float] = None,
) -> Optional[ReplanReason]:
    """Why the plan ``check`` measured is planned once more (None: it is
    kept). ``budget``: mode="budget"'s peak in bytes (None: no budget);
    ``done``: the reasons this graph was planned again for already;
    ``candidates``: ``OffloadPlan.candidates`` (None: not counted). A graph with nothing a
    prediction decides (no candidate to copy, no budget to recompute for)
    is never planned again: the re-plan would compile the same graph (HF
    Llama with nothing marked: a compile, +4.2 % off, for nothing).

    A prediction off by more than its tolerance (``PredictionCheck.within``)
    is corrected once, by the first re-plan (the peak with it). A budget is a promise about
    the measured peak: a plan that predicted its peak within the budget and
    measured it over is planned once more against what it measured, after
    a re-plan for its prediction too (HF Llama at budget 0.8 on the H200:
    2075 MiB measured against 2070, 2057 after). A plan
    that predicted its peak over the budget already said it could not
    reach it; planning it again would not either.

    ``max_overhead`` (mode="auto"; None: another mode) is a promise about
    the measured slowdown: a plan measured over ``max_overhead`` against
    plain Inductor's graph measured beside it (``check.plain``), or, where
    that was not measured, over
    ``max_overhead`` + ``STALL_TOLERANCE`` (``overhead_as_measured``, with
    ``without_offload`` the prediction without offload) is planned once
    more under a calibration fitted to that call, after a re-plan for
    its prediction too: a first plan measured within its tolerances has
    its stalls within ``STALL_TOLERANCE`` of the predicted, so this is
    mostly the re-plan's own plan measured off, or a forward that ran past
    the device's speed (the test decoder at max_overhead 1 %
    on the H200: 0.49 ms of stalls measured, none predicted, after its
    re-plan).

    Under it by more than ``room_margin(max_overhead)`` against plain
    Inductor's graph measured beside the plan, where the limit bound the
    selection (it predicted its choice within ``room_margin`` of the slowdown
    it was allowed: ``unspent``, the allowed minus the predicted) and chose
    fewer copies (``chosen``) than ``candidates``, it is planned once more to spend the
    rest (``ReplanReason.ROOM``): a re-plan that spends max_overhead of
    plain Inductor's measured step, as an overhead re-plan does. Not after
    an overhead re-plan (that one spent it already), and only as the first
    or the second re-plan: a graph is planned at most twice more. A room
    re-plan measured over max_overhead is planned again for the overhead
    where a re-plan is left; the last plan over max_overhead +
    ``OVERHEAD_NOISE`` falls back (``choose_fallback``).

    A re-plan whose own peak is off its prediction by more than the
    tolerance, where no reason above applies, is planned once more as the
    second re-plan (``ReplanReason.PEAK``): the calibration's peak offset was
    measured where the plan before had its peak, and the re-plan's peak
    stands elsewhere. The decoder at budget 0.2 on the H200 (twenty-fifth
    session): the first plan's peak predicted to 3 KiB, its re-plan's 62 MiB
    (6.4 %) low, at layer 0's attention backward, where Inductor's fused
    RMSNorm weight-gradient kernel keeps two 32 MiB buffers alive past their
    last use in the graph; a plan of the same copies calibrated on that
    miss predicted 935.4 MiB and measured 937.1."""
    if nothing_to_decide(candidates, budget):
        return None
    if not done and not check.within():
        return ReplanReason.PREDICTION  # which corrects the peak too
    if check.measured.peak is not None and budget is not None and ReplanReason.BUDGET not in done:
        if check.predicted.peak <= budget < check.measured.peak:
            return ReplanReason.BUDGET
    if max_overhead is not None and without_offload is not None and ReplanReason.OVERHEAD not in done:
        # Against plain Inductor's graph measured beside the plan, the
        # promise itself; against a step without offload predicted, with
        # the prediction's own noise.
        tolerance = 0.0 if check.plain is not None else STALL_TOLERANCE
        if overhead_as_measured(check, without_offload) > max_overhead + tolerance:
            return ReplanReason.OVERHEAD
    measured = check.measured_overhead
    if (
        max_overhead is not None and measured is not None and chosen is not None and candidates is not None
        and unspent is not None and unspent < room_margin(max_overhead) and chosen < candidates and len(done) < 2
        and ReplanReason.OVERHEAD not in done and ReplanReason.ROOM not in done
        and measured < max_overhead - room_margin(max_overhead)
    ):
        return ReplanReason.ROOM
    if (
        done and len(done) < 2 and ReplanReason.PEAK not in done
        and check.peak_error is not None and abs(check.peak_error) > REPLAN_TOLERANCE
    ):
        return ReplanReason.PEAK
    return None


@dataclasses.dataclass(frozen=True)
class Fallback:
    """What a graph runs in place of a plan measured over max_overhead
    (``choose_fallback``)."""

    plan: Optional[int]  # the index (into ``plans``) of the earlier plan run instead; None: plain Inductor's graph
    reason: str  # why, with the figures: what ``OffloadPlan.fallback`` prints

    @property
    def plain(self) -> bool:
        return self.plan is None


def choose_fallback(
    plans: Sequence[tuple[str, Optional[PredictionCheck], bool]], max_overhead: float, plain_runs: bool = True
) -> Optional[Fallback]:
    """mode="auto"'s last word on a graph: ``plans`` are each plan of the
    graph (its graph id, its check, None: not measured, and whether it frees
    anything by design: copies, or a recompute partition), oldest first, the
    last the plan running now, which will not be planned again.

    Where that plan frees nothing and was measured against plain Inductor's
    graph, it is plain Inductor's partition compiled under this package's
    Inductor options (buffer reuse and peak-memory reordering off, for the
    copies' schedule), a slowdown bought for nothing (timm ResNet-50 on the
    H200: +2.7 % and +3.3 %, 2026-11-28): plain Inductor's graph runs
    (``plain_runs``: the device had room for it; else None). Where it
    measured more than ``max_overhead`` + ``OVERHEAD_NOISE`` over plain
    Inductor's graph measured beside it (``measured_overhead``), the graph
    runs the earlier plan measured within that which freed the most (the
    lowest peak, measured where it was; then the least slowdown) among those
    that free anything; with none, plain Inductor's graph (``plain_runs``;
    else None: the plan runs on, nothing within the promise can run). None
    too where the last plan is within, or was not measured against plain
    Inductor (its overhead is a prediction, not a measurement)."""
    last_id, last, last_frees = plans[-1] if plans else ("", None, True)
    limit = max_overhead + OVERHEAD_NOISE
    if last is None or last.measured_overhead is None:
        return None
    if not last_frees:
        if not plain_runs:
            return None
        return Fallback(None, (
            f"frees nothing (no copy, no recompute; measured {last.measured_overhead:+.1%} against plain Inductor's "
            "graph): runs plain Inductor's graph instead"
        ))
    if last.measured_overhead <= limit:
        return None
    over = (
        f"measured {last.measured_overhead:+.1%} against plain Inductor's graph, over max_overhead "
        f"{max_overhead:.1%} (+{OVERHEAD_NOISE:.0%} noise), and not planned again"
    )
    within = [
        (i, c) for i, (_, c, frees) in enumerate(plans[:-1])
        if frees and c is not None and c.measured_overhead is not None and c.measured_overhead <= limit
    ]
    if within:
        def most_freed_then_fastest(item: tuple[int, PredictionCheck]) -> tuple[float, float]:
            return (float(item[1].peak), item[1].measured_overhead)  # type: ignore[return-value]

        index, best = min(within, key=most_freed_then_fastest)
        return Fallback(index, f"{over}: runs {plans[index][0]}'s plan instead, measured {best.measured_overhead:+.1%}")
    if not plain_runs:
        return None
    return Fallback(None, f"{over}: no plan of this graph measured within; runs plain Inductor's graph instead")


@dataclasses.dataclass(frozen=True)
class MeasuredSet:
    """A set of copies plans of one graph ran under mode="auto", and what
    each run measured against plain Inductor's graph beside it (kept per
    graph for its later plans and compiles: ``compiled_graph``; read by
    ``measured_floor``)."""

    storages: frozenset[str]  # the copies (their storages' names in the forward graph)
    overheads: tuple[float, ...]  # each run's PredictionCheck.measured_overhead, oldest first
    peaks: tuple[int, ...]  # each run's PredictionCheck.peak (measured, else predicted), bytes

    @property
    def overhead(self) -> float:
        return statistics.median(self.overheads)

    @property
    def peak(self) -> int:
        return int(statistics.median(self.peaks))

    def again(self, overhead: float, peak: int) -> "MeasuredSet":
        """The same copies, run and measured once more."""
        return dataclasses.replace(self, overheads=(*self.overheads, overhead), peaks=(*self.peaks, peak))

    def describe(self) -> str:
        runs = "once" if len(self.overheads) == 1 else f"the median of {len(self.overheads)} runs"
        return (
            f"measured {self.overhead:+.1%} against plain Inductor's graph beside it ({runs}), "
            f"peak {format_bytes(self.peak)}"
        )


def measured_floor(sets: Sequence[MeasuredSet], max_overhead: float) -> Optional[MeasuredSet]:
    """mode="auto": of the sets of copies a graph's plans ran (``sets``),
    the one measured within ``max_overhead`` itself (the median of its
    runs; no noise allowed) with the lowest peak (then the least slowdown);
    None where none was. A plan of the graph that predicts a higher peak
    runs this set instead (``backend``): a promise measured kept outweighs
    one predicted, and a larger max_overhead never frees less than a
    smaller one measured in the same process (HF Llama on the H200,
    twenty-first session: 2 % freed 396 MiB where 1 % freed 428, both
    measured within theirs). Stricter than ``choose_fallback``, which
    allows ``OVERHEAD_NOISE`` because its other choice is plain
    Inductor's graph, freeing nothing: a floor displaces a selection that
    may keep the promise too."""
    within = [s for s in sets if s.storages and s.overhead <= max_overhead]
    return min(within, key=lambda s: (s.peak, s.overhead, sorted(s.storages)), default=None)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What the simulator is corrected by. The identity (all defaults)
    changes nothing."""

    forward_scale: float = 1.0  # node times of the forward x this
    backward_scale: float = 1.0
    d2h_scale: float = 1.0  # the profile's device->host bandwidth x this
    h2d_scale: float = 1.0
    peak_offset: int = 0  # bytes the memory timeline missed at the peak of the plan measured last
    source: str = ""  # where it was measured
    peak_measured: bool = False  # False: peak_offset is 0 for want of a measured peak
    between_ms: float = 0.0  # the host's time between forward and backward (MeasuredCall.between_ms)
    host_forward_scale: float = 1.0  # the host's time per node of the forward x this
    host_backward_scale: float = 1.0
    # The compute stream's time per runtime op of the forward past the host
    # clock (NodeTimes.forward_op_ms): the measured forward's time over the
    # device's speed, spread over its runtime ops (fit_calibration).
    forward_op_ms: float = 0.0
    # ... of the backward (NodeTimes.backward_op_ms): what the plan's
    # measured backward took past plain Inductor's speed (fit_calibration).
    backward_op_ms: float = 0.0
    # Fitted in an earlier compile of the same graph and carried to this one
    # (compiled_graph.carried_calibration): its scales only, without the peak
    # offset and the time between forward and backward of the plan measured.
    carried: bool = False
    # mode="auto": plain Inductor's forward and backward of this graph as
    # measured beside the plan (PredictionCheck.plain), the step max_overhead
    # is held to (``overhead_allowed``); None: not measured.
    plain_work_ms: Optional[float] = None
    # What the memory timeline missed at the peak of each partition a plan
    # of this graph was measured on, by the recompute level it was
    # partitioned under (None: the first partition, as configured), in the
    # order measured. The offset is the partition's, not the device's: on
    # HF Llama at budget 0.4 (H200, twenty-seventh session) offload alone
    # measured +14 MiB, level 0.1 of the same graph +106 (and +62 under a
    # re-plan's other copies), and a re-plan that moved offload alone's to
    # every level predicted 0.1's peak 3.3 % low.
    partition_offsets: tuple[tuple[Optional[float], int], ...] = ()

    def offset_for(self, level: Optional[float]) -> int:
        """The bytes a plan on the partition of recompute ``level`` adds to
        its memory timeline's peak: what that partition measured, where one
        of its plans was, else what the measured partition of the nearest
        level did (the first partition counted as level 1.0; of two as
        near, the one measured later), 0 where no peak was measured.
        Nearest, because neighbouring levels recompute much the same, and
        the timeline misses differ most between recomputing partitions and
        offload alone's (HF Llama at budget 0.4, H200, twenty-seventh
        session: 14 MiB on offload alone's, 62-106 on level 0.1's)."""
        if not self.partition_offsets:
            return self.peak_offset
        own = dict(self.partition_offsets)
        if level in own:
            return own[level]
        at = _level_value(level)
        order = range(len(self.partition_offsets))
        # Rounded: levels are tenths, and 0.6 - 0.2 < 1.0 - 0.6 in binary.
        nearest = min(order, key=lambda i: (round(abs(_level_value(self.partition_offsets[i][0]) - at), 6), -i))
        return self.partition_offsets[nearest][1]

    def times(self, times: NodeTimes) -> NodeTimes:
        return NodeTimes(
            {k: v * self.forward_scale for k, v in times.forward.items()},
            {k: v * self.backward_scale for k, v in times.backward.items()},
            f"{times.source}, calibrated",
            {k: v * self.host_forward_scale for k, v in times.host_forward.items()},
            {k: v * self.host_backward_scale for k, v in times.host_backward.items()},
            times.launch_forward_ms * self.host_forward_scale,
            times.launch_backward_ms * self.host_backward_scale,
            times.forward_op_ms + self.forward_op_ms,
            times.backward_op_ms + self.backward_op_ms,
        )

    def profile(self, profile: DeviceProfile) -> DeviceProfile:
        return dataclasses.replace(
            profile,
            d2h_gbps=profile.d2h_gbps * self.d2h_scale,
            h2d_gbps=profile.h2d_gbps * self.h2d_scale,
            source=f"{profile.source}, calibrated",
        )

    def describe(self) -> str:
        sign = "+" if self.peak_offset >= 0 else "-"
        alone = (
            f"{self.between_ms:.2f} ms between forward and backward; peak {sign}{format_bytes(abs(self.peak_offset))}"
            + _describe_partition_offsets(self.partition_offsets)
            if self.peak_measured
            else "peak and time between forward and backward not carried" if self.carried
            else "peak and time between forward and backward not measured"
        )
        host = ""
        if (self.host_forward_scale, self.host_backward_scale) != (1.0, 1.0):
            host = f"; host time x{self.host_forward_scale:.3f} forward, x{self.host_backward_scale:.3f} backward"
        if self.forward_op_ms:
            host += f"; {self.forward_op_ms * 1e3:.0f} us per runtime op of the forward"
        if self.backward_op_ms:
            host += f"; {self.backward_op_ms * 1e3:.0f} us per runtime op of the backward"
        if self.plain_work_ms is not None:
            host += f"; plain Inductor's forward and backward {self.plain_work_ms:.2f} ms (measured)"
        return (
            f"calibrated on {self.source}: node times x{self.forward_scale:.3f} forward, "
            f"x{self.backward_scale:.3f} backward; copy bandwidth x{self.d2h_scale:.3f} device->host, "
            f"x{self.h2d_scale:.3f} host->device{host}; {alone}"
        )


def _level_value(level: Optional[float]) -> float:
    """A partition's recompute level as a number: the first partition's
    (None, as configured) is PyTorch's default budget, 1.0."""
    return 1.0 if level is None else level


def _describe_partition_offsets(offsets: tuple[tuple[Optional[float], int], ...]) -> str:
    """Where plans on more than one partition were measured: each one's
    peak offset (a single one is ``peak_offset`` itself)."""
    if len(offsets) < 2:
        return ""
    parts = ", ".join(
        f"{'as configured' if level is None else f'level {level:g}'} {'+' if offset >= 0 else '-'}"
        f"{format_bytes(abs(offset))}"
        for level, offset in offsets
    )
    return f" (per partition measured: {parts})"


def overhead_allowed(
    max_overhead: float, calibration: Optional[Calibration], without_offload: StepPrediction
) -> float:
    """mode="auto": the slowdown over ``without_offload`` (the step without
    offload as predicted under ``calibration``) that the selection may
    spend. ``max_overhead`` itself, unless the calibration holds plain
    Inductor's graph as measured (``Calibration.plain_work_ms``): then
    ``max_overhead`` of that measured step, as a slowdown over the
    predicted (negative where plain Inductor measured faster than
    predicted by more than ``max_overhead``: no copy fits). The promise is
    about the step a user measures; a prediction of the step without
    offload carries the simulator's error into it (HF Llama, auto 1 % on
    the H200: predicted 32.66 ms, plain Inductor measured about 32.3, and a
    plan within +1 % of the predicted measured +2.7 % of the measured)."""
    if calibration is None or calibration.plain_work_ms is None:
        return max_overhead
    predicted = without_offload.step_ms - without_offload.between_ms
    if predicted <= 0:
        return max_overhead
    return (1 + max_overhead) * calibration.plain_work_ms / predicted - 1


def _plain_speeds(
    check: PredictionCheck, without_offload: Optional[StepPrediction], prior: Optional[Calibration]
) -> Optional[tuple[float, float]]:
    """The device's speed in each phase as plain Inductor's graph ran it
    (scales on the simulator's node times, forward and backward): its forward
    and backward as the check measured the plan against it
    (``PredictionCheck.plain_work_ms``, split as its median call split
    them), less what the step without offload was predicted to idle for
    the host, over the simulator's own times of that step
    (``without_offload``'s, made under ``prior``, over ``prior``'s scales).
    The pairs' figure, not the median plain call's: the step without offload
    is then predicted as what the plan's measured slowdown
    (``PredictionCheck.measured_overhead``) is a slowdown over. None without
    a measured plain Inductor or a prediction to hold it to."""
    phases = _plain_phases(check)
    if phases is None or without_offload is None:
        return None
    own_forward = without_offload.forward_ms / (prior.forward_scale if prior is not None else 1.0)
    own_backward = without_offload.backward_ms / (prior.backward_scale if prior is not None else 1.0)
    if own_forward <= 0 or own_backward <= 0:
        return None
    return (
        max(phases[0] - without_offload.forward_idle_ms, 0.0) / own_forward,
        max(phases[1] - without_offload.backward_idle_ms, 0.0) / own_backward,
    )


def _plain_phases(check: PredictionCheck) -> Optional[tuple[float, float]]:
    """Plain Inductor's forward and backward (ms) as the check measured the
    plan against it: ``PredictionCheck.plain_work_ms``, split as its median
    call split them; None without plain Inductor measured."""
    plain, work = check.plain, check.plain_work_ms
    if plain is None or work is None or plain.work_ms <= 0:
        return None
    forward = work * plain.forward_ms / plain.work_ms
    return forward, work - forward


def _held_to_plain(
    calibration: Calibration,
    simulate_without: Callable[[Calibration], StepPrediction],
    phases: tuple[float, float],
    forward: bool,
    backward: bool,
) -> Calibration:
    """``calibration`` with the speed of each phase named (``forward``,
    ``backward``) moved until the step without offload
    (``simulate_without``: the plan's graphs without their runtime ops),
    its host clock as fitted, takes plain Inductor's time in that phase
    (``phases``). ``_plain_speeds`` took the idling for the host from the
    prediction made before the fit; the host scale fitted on the plan idles
    the device otherwise (HF Llama, auto 1 % on the H200: the step without
    offload came out 0.9 % above plain Inductor's, and the re-plan had
    +0.1 % to spend). By bisection: a phase's time is non-decreasing in its
    speed's scale. Where the host clock alone takes longer than plain
    Inductor's phase, no speed reaches it and the scale stays."""
    for name, on, target in (("forward", forward, phases[0]), ("backward", backward, phases[1])):
        if not on:
            continue

        def phase_at(scale: float, name: str = name) -> float:
            p = simulate_without(dataclasses.replace(calibration, **{f"{name}_scale": scale}))
            return (p.forward_ms + p.forward_idle_ms) if name == "forward" else (p.backward_ms + p.backward_idle_ms)

        start = getattr(calibration, f"{name}_scale")
        low, high = start / 4, start * 4
        if phase_at(low) > target or phase_at(high) < target:
            continue
        for _ in range(30):  # log-space bisection
            mid = math.sqrt(low * high)
            if phase_at(mid) > target:
                high = mid
            else:
                low = mid
        calibration = dataclasses.replace(calibration, **{f"{name}_scale": low})
    return calibration


def _fit_scale(wait_at: Callable[[float], float], target: float, noise: float, start: float = 1.0) -> float:
    """The bandwidth scale at which ``wait_at(scale)`` (the simulated stall,
    non-increasing in the scale) meets ``target``; ``start`` (an earlier
    fit's scale, 1.0: none) where its stall is within ``noise`` of it
    already. A stall is censored data: a call that stalled on no copy says
    only that the bandwidth was at least what its copies needed, so it
    keeps the scale an earlier call that did stall measured, where that
    scale stalls this call no more than measured."""
    if abs(wait_at(start) - target) <= noise:
        return start
    low, high = (_SCALE_RANGE[0], start) if wait_at(start) < target else (start, _SCALE_RANGE[1])
    for _ in range(30):  # log-space bisection: ~1e-8 relative
        mid = math.sqrt(low * high)
        if wait_at(mid) > target:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)


def _fit_host(busy_at: Callable[[float], float], target: float, most: float, noise: float) -> float:
    """The host-time scale of one phase: ``most`` (the measured host time
    over the simulated one, 1 where the host was not measured) where the
    simulated phase (``busy_at(scale)``: its compute and its idling for the
    host, non-decreasing in the scale) stays within ``noise`` of ``target``
    with it, else the largest scale that does. The host's wall time holds
    more than the nodes' launches (the wrappers before the first and after
    the last, which keep no kernel waiting), so it is a bound: the measured
    call says how long the device ran, and a host clock that idles it longer
    is slower than the host was where it mattered (HF Llama, 25 copies: 9.5
    ms of host time beside an 8.6 ms forward, which the device ran without
    idling for 5 ms)."""
    if busy_at(most) <= target + noise:
        return most
    low, high = most / 64, most
    if busy_at(low) > target + noise:
        # Not the host's doing (only a phase without compute times, scaled
        # by 1, gets here): the least scale, said.
        log.info("offload_pass: the host clock idles the device past the measured phase at any scale")
        return low
    for _ in range(30):  # log-space bisection
        mid = math.sqrt(low * high)
        if busy_at(mid) <= target + noise:
            low = mid
        else:
            high = mid
    return low


def _host_scale(measured: Optional[float], simulated: float) -> float:
    return measured / simulated if measured and simulated > 0 else 1.0


def fit_calibration(
    check: PredictionCheck,
    simulate: Callable[[Calibration], StepPrediction],
    source: str,
    prior: Optional[Calibration] = None,
    without_offload: Optional[StepPrediction] = None,
    simulate_without: Optional[Callable[[Calibration], StepPrediction]] = None,
    level: Optional[float] = None,
) -> Calibration:
    """The calibration under which ``simulate`` (the step simulator over the
    graphs that were measured) reproduces ``check.measured``: compute per
    phase scaled to the measured time less its stalls, the host's time per
    phase scaled to the host's measured time as far as the device did not
    idle for it (``_fit_host``), then each direction's bandwidth scaled
    until the simulated stall is the measured one (the forward's first: the
    backward's reloads queue behind it), and the peak moved by what the
    timeline missed (``level``: the recompute level the measured plan was
    partitioned under; the offset is that partition's, kept beside the
    earlier partitions' offsets ``prior`` holds, ``offset_for``). Every
    scale is of the simulator's own node times and
    bandwidths (``simulate(Calibration())``), whatever calibration
    ``check.predicted`` was made under (a plan planned again is measured
    and may be fitted too). ``prior``: that calibration (None: the
    simulator's own), whose bandwidth scales are kept where they reproduce
    the measured stalls within the noise (``_fit_scale``): a plan that
    stalled on no copy cannot tell a bandwidth the plan before it measured
    short from the profile's (HF Llama, auto 1 % on the H200: graph 0
    stalled 1.18 ms, device->host x0.935; graph 1 stalled none and was
    fitted x1.000; graph 2, planned under that, stalled 1.04 ms where it
    predicted none, and measured +3.6 % against max_overhead 1 %).
    ``without_offload``: the step without offload as predicted under
    ``prior``; with ``check.plain`` (plain Inductor's graph measured), it
    gives the device's speed in each phase (``_plain_speeds``; with
    ``simulate_without``, the plan's graphs simulated without their runtime
    ops, held to plain Inductor's times under the host clock as fitted,
    ``_held_to_plain``), the
    forward's in place of the bound ``PHASE_SPEED_TOLERANCE`` sets from the
    backward's: what the plan's phase took past plain Inductor's speed is
    its runtime ops' (HF Llama on the H200: every plan with copies ran its
    forward 0.6 ms past plain Inductor's, its stalls aside; fitted as the
    device's speed, the simulator put a plan without copies 2.6-2.9 % above
    its measured step, and the step without offload as far above plain
    Inductor's; in the backward, with the plan's own speed standing in for
    the device's, auto 2 % put the step without offload 2.3 % above plain
    Inductor's as measured, and no copy fitted the budget), a time per
    runtime op of that phase
    (``Calibration.forward_op_ms`` / ``backward_op_ms``).

    The compute's scale takes in whatever the device idled for the host in
    the measured call (events time the stream, not its kernels), and the
    host clock then idles it only past that: the calibrated simulator
    reproduces the measured plan, and a plan with more copies pays their
    host time where the host clock, so scaled, falls behind. Except where
    the forward measured slower than the backward's speed (by more than
    ``PHASE_SPEED_TOLERANCE``) and runs runtime ops: its compute then runs
    at that bound (``_forward_speed``), and what the host clock leaves of the measured
    forward is a time per runtime op (``Calibration.forward_op_ms``), which
    the step without offload does not pay and a plan with more copies pays
    more of. The noise of
    every fit is ``STALL_TOLERANCE`` of the measured work (the check's
    denominator), split between the two directions' stalls, whose sum the
    check holds to it."""
    measured = check.measured
    predicted = simulate(Calibration())
    forward = max(measured.forward_ms - measured.forward_wait_ms, 0.0)
    backward = max(measured.backward_ms - measured.backward_wait_ms, 0.0)
    noise = STALL_TOLERANCE * (measured.step_ms - measured.between_ms)
    forward_scale = forward / predicted.forward_ms if predicted.forward_ms else 1.0
    backward_scale = backward / predicted.backward_ms if predicted.backward_ms else 1.0
    # One device runs both phases at about one speed: where the forward
    # measured slower than ``_forward_speed`` allows and it runs runtime
    # ops, the rest is theirs, not the kernels', and so not the step
    # without offload's (HF Llama, H200, 15 copies: forward x1.079, backward
    # x0.971; taken as the device's speed it put the step without offload
    # 2.2 % above plain Inductor's, and auto 2 % measured +4.4 %).
    # With plain Inductor measured beside the plan, its speed in each phase
    # is the device's, and what the plan's phase took past it is its
    # runtime ops' (``_plain_speeds``).
    plain = _plain_speeds(check, without_offload, prior)
    forward_speed, backward_speed = plain or (_forward_speed(forward_scale, backward_scale), backward_scale)
    forward_bound = predicted.forward_ops > 0 and forward_speed < forward_scale
    backward_bound = plain is not None and predicted.backward_ops > 0 and backward_speed < backward_scale
    offset = 0 if measured.peak is None else measured.peak - predicted.timeline_peak
    offsets = () if prior is None else tuple(o for o in prior.partition_offsets if o[0] != level)
    calibration = Calibration(
        forward_scale=forward_speed if forward_bound else forward_scale,
        backward_scale=backward_speed if backward_bound else backward_scale,
        peak_offset=offset,
        source=source,
        peak_measured=measured.peak is not None,
        between_ms=measured.between_ms,
        partition_offsets=offsets + ((level, offset),) if measured.peak is not None else offsets,
    )

    def forward_at(scale: float) -> float:
        p = simulate(dataclasses.replace(calibration, host_forward_scale=scale))
        return p.forward_ms + p.forward_idle_ms

    most = _host_scale(measured.host_forward_ms, predicted.forward_issue_ms)
    calibration = dataclasses.replace(calibration, host_forward_scale=_fit_host(forward_at, forward, most, noise))

    def backward_at(scale: float) -> float:
        p = simulate(dataclasses.replace(calibration, host_backward_scale=scale))
        return p.backward_ms + p.backward_idle_ms

    most = _host_scale(measured.host_backward_ms, predicted.backward_issue_ms)
    calibration = dataclasses.replace(calibration, host_backward_scale=_fit_host(backward_at, backward, most, noise))
    phases = _plain_phases(check)
    if plain is not None and phases is not None and simulate_without is not None:
        calibration = _held_to_plain(calibration, simulate_without, phases, forward_bound, backward_bound)
    if forward_bound:
        left = forward - forward_at(calibration.host_forward_scale)
        if left > 0:
            calibration = dataclasses.replace(calibration, forward_op_ms=left / predicted.forward_ops)
    if backward_bound:
        left = backward - backward_at(calibration.host_backward_scale)
        if left > 0:
            calibration = dataclasses.replace(calibration, backward_op_ms=left / predicted.backward_ops)

    def forward_wait(scale: float) -> float:
        return simulate(dataclasses.replace(calibration, d2h_scale=scale)).forward_wait_ms

    start = prior or Calibration()
    calibration = dataclasses.replace(
        calibration, d2h_scale=_fit_scale(forward_wait, measured.forward_wait_ms, noise / 2, start.d2h_scale)
    )

    def backward_wait(scale: float) -> float:
        return simulate(dataclasses.replace(calibration, h2d_scale=scale)).backward_wait_ms

    return dataclasses.replace(
        calibration, h2d_scale=_fit_scale(backward_wait, measured.backward_wait_ms, noise / 2, start.h2d_scale)
    )
