"""The fit: a calibration under which the step simulator reproduces a measured call.

Takes: a ``PredictionCheck`` and the step simulator over the graphs that
were measured (a callable, ``simulate(calibration)``). Gives:
``fit_calibration``, in named steps: the device's speed per phase, the
host clock per phase, plain Inductor's speed where it was measured beside
the plan, the time per runtime op, and the copy bandwidth per direction.
Pure functions: the simulator is handed in, so everything here runs without
a device.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Callable, NamedTuple, Optional

from offload_pass.feedback.check import STALL_TOLERANCE, PredictionCheck, forward_speed
from offload_pass.planning.calibration import Calibration
from offload_pass.planning.step_model import StepPrediction

__all__ = ["fit_calibration"]

log = logging.getLogger("offload_pass")

# The bandwidth scales the bisection may reach (a copy 8x slower or faster
# than profiled is a wrong profile, not a calibration).
_SCALE_RANGE = (1 / 8, 8.0)

Simulator = Callable[[Calibration], StepPrediction]


class _Phases(NamedTuple):
    """The measured compute per phase (stalls aside), ms, and the fit's noise."""

    forward: float
    backward: float
    noise: float


def fit_calibration(
    check: PredictionCheck,
    simulate: Simulator,
    source: str,
    prior: Optional[Calibration] = None,
    without_offload: Optional[StepPrediction] = None,
    simulate_without: Optional[Simulator] = None,
    level: Optional[float] = None,
) -> Calibration:
    """The calibration under which ``simulate`` reproduces ``check.measured``.

    Every scale is of the simulator's own times (``simulate(Calibration())``),
    whatever calibration the prediction was made under. Steps: the device's
    speed per phase (``_speeds``: where plain Inductor's graph was measured
    beside the plan, its speed is the device's, and what the plan's phase
    took past it belongs to its runtime ops); the host clock per phase
    (``_fit_host``); plain Inductor's phases held (``_held_to_plain``); the
    time per runtime op; each direction's bandwidth (``_fit_scale``, the
    forward's first: the backward's reloads queue behind it; ``prior``'s
    scale kept where it reproduces the stall within the noise); and the
    peak offset of the partition of recompute ``level``. The noise is
    ``STALL_TOLERANCE`` of the measured work, split between the directions."""
    measured = check.measured
    predicted = simulate(Calibration())
    phases = _Phases(
        max(measured.forward_ms - measured.forward_wait_ms, 0.0),
        max(measured.backward_ms - measured.backward_wait_ms, 0.0),
        STALL_TOLERANCE * (measured.step_ms - measured.between_ms),
    )
    plain = _plain_speeds(check, without_offload, prior)
    calibration, bounds = _speeds(check, predicted, phases, plain, source, prior, level)
    calibration = _host_clock(calibration, simulate, check, predicted, phases)
    plain_phases = _plain_phases(check)
    if plain is not None and plain_phases is not None and simulate_without is not None:
        calibration = _held_to_plain(calibration, simulate_without, plain_phases, *bounds)
    calibration = _op_times(calibration, simulate, predicted, phases, bounds)
    return _bandwidths(calibration, simulate, check, phases.noise, prior or Calibration())


def _speeds(
    check: PredictionCheck, predicted: StepPrediction, phases: _Phases, plain: Optional[tuple[float, float]],
    source: str, prior: Optional[Calibration], level: Optional[float],
) -> tuple[Calibration, tuple[bool, bool]]:
    """The node-time scale per phase and the peak offset, and whether each
    phase's speed is bounded (its runtime ops took the rest): the forward
    where it measured slower than ``forward_speed`` allows (or than plain
    Inductor's), the backward where plain Inductor's speed was measured."""
    measured = check.measured
    forward_scale = phases.forward / predicted.forward_ms if predicted.forward_ms else 1.0
    backward_scale = phases.backward / predicted.backward_ms if predicted.backward_ms else 1.0
    forward_at, backward_at = plain or (forward_speed(forward_scale, backward_scale), backward_scale)
    forward_bound = predicted.forward_ops > 0 and forward_at < forward_scale
    backward_bound = plain is not None and predicted.backward_ops > 0 and backward_at < backward_scale
    offset = 0 if measured.peak is None else measured.peak - predicted.timeline_peak
    offsets = () if prior is None else tuple(o for o in prior.partition_offsets if o[0] != level)
    calibration = Calibration(
        forward_scale=forward_at if forward_bound else forward_scale,
        backward_scale=backward_at if backward_bound else backward_scale,
        peak_offset=offset,
        source=source,
        peak_measured=measured.peak is not None,
        between_ms=measured.between_ms,
        partition_offsets=offsets + ((level, offset),) if measured.peak is not None else offsets,
    )
    return calibration, (forward_bound, backward_bound)


def _phase_busy(simulate: Simulator, calibration: Calibration, forward: bool, **scale: float) -> float:
    """A phase's compute and its idling for the host, simulated under ``calibration`` with ``scale`` set."""
    p = simulate(dataclasses.replace(calibration, **scale))
    return (p.forward_ms + p.forward_idle_ms) if forward else (p.backward_ms + p.backward_idle_ms)


def _host_clock(
    calibration: Calibration, simulate: Simulator, check: PredictionCheck, predicted: StepPrediction,
    phases: _Phases,
) -> Calibration:
    """The host-time scale per phase (``_fit_host``), the forward's first."""
    measured = check.measured
    most = _host_scale(measured.host_forward_ms, predicted.forward_issue_ms)
    fitted = _fit_host(
        lambda s: _phase_busy(simulate, calibration, True, host_forward_scale=s), phases.forward, most, phases.noise
    )
    calibration = dataclasses.replace(calibration, host_forward_scale=fitted)
    most = _host_scale(measured.host_backward_ms, predicted.backward_issue_ms)
    fitted = _fit_host(
        lambda s: _phase_busy(simulate, calibration, False, host_backward_scale=s), phases.backward, most,
        phases.noise,
    )
    return dataclasses.replace(calibration, host_backward_scale=fitted)


def _op_times(
    calibration: Calibration, simulate: Simulator, predicted: StepPrediction, phases: _Phases,
    bounds: tuple[bool, bool],
) -> Calibration:
    """In a phase whose speed is bounded, what the host clock leaves of the
    measured phase, spread over its runtime ops."""
    if bounds[0]:
        left = phases.forward - _phase_busy(simulate, calibration, True)
        if left > 0:
            calibration = dataclasses.replace(calibration, forward_op_ms=left / predicted.forward_ops)
    if bounds[1]:
        left = phases.backward - _phase_busy(simulate, calibration, False)
        if left > 0:
            calibration = dataclasses.replace(calibration, backward_op_ms=left / predicted.backward_ops)
    return calibration


def _bandwidths(
    calibration: Calibration, simulate: Simulator, check: PredictionCheck, noise: float, start: Calibration
) -> Calibration:
    """Each direction's bandwidth scale, fitted to its measured stall (the forward's first)."""
    measured = check.measured

    def forward_wait(scale: float) -> float:
        return simulate(dataclasses.replace(calibration, d2h_scale=scale)).forward_wait_ms

    calibration = dataclasses.replace(
        calibration, d2h_scale=_fit_scale(forward_wait, measured.forward_wait_ms, noise / 2, start.d2h_scale)
    )

    def backward_wait(scale: float) -> float:
        return simulate(dataclasses.replace(calibration, h2d_scale=scale)).backward_wait_ms

    return dataclasses.replace(
        calibration, h2d_scale=_fit_scale(backward_wait, measured.backward_wait_ms, noise / 2, start.h2d_scale)
    )


def _plain_speeds(
    check: PredictionCheck, without_offload: Optional[StepPrediction], prior: Optional[Calibration]
) -> Optional[tuple[float, float]]:
    """The device's speed in each phase as plain Inductor's graph ran it:
    its phases as the check measured the plan against them, less what the
    step without offload was predicted to idle for the host, over the
    simulator's own times of that step (``without_offload``, made under
    ``prior``). None without a measured plain Inductor or a prediction."""
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
    plan against it, split as its median call split them; None without it."""
    plain, work = check.plain, check.plain_work_ms
    if plain is None or work is None or plain.work_ms <= 0:
        return None
    forward = work * plain.forward_ms / plain.work_ms
    return forward, work - forward


def _held_to_plain(
    calibration: Calibration, simulate_without: Simulator, phases: tuple[float, float], forward: bool,
    backward: bool,
) -> Calibration:
    """``calibration`` with the speed of each phase named moved until the
    step without offload (``simulate_without``), its host clock as fitted,
    takes plain Inductor's time in that phase (``phases``): the host scale
    fitted on the plan idles the device otherwise than predicted before the
    fit. By bisection (a phase's time is non-decreasing in its speed's
    scale); where no speed reaches it, the scale stays."""
    for name, on, target in (("forward", forward, phases[0]), ("backward", backward, phases[1])):
        if not on:
            continue

        def phase_at(scale: float, name: str = name) -> float:
            return _phase_busy(simulate_without, calibration, name == "forward", **{f"{name}_scale": scale})

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
    fit's scale) where its stall is within ``noise`` already. A stall is
    censored data: a call that stalled on no copy says only that the
    bandwidth was at least what its copies needed."""
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
    over the simulated one) where the simulated phase (``busy_at(scale)``,
    non-decreasing in the scale) stays within ``noise`` of ``target`` with
    it, else the largest scale that does. The host's wall time holds more
    than the nodes' launches, so it is a bound, not a target."""
    if busy_at(most) <= target + noise:
        return most
    low, high = most / 64, most
    if busy_at(low) > target + noise:
        # Not the host's doing (only a phase without compute times gets here): the least scale, said.
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
