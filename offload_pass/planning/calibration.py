"""The calibration a plan is made under: the step simulator's corrections.

Takes: nothing (the feedback loop, ``offload_pass/feedback/fit.py``, fits
one to calls measured on the device). Gives: ``Calibration``, scales on the
simulator's node times, host times and copy bandwidths and the bytes its
memory timeline missed at the peak, which the pipeline applies to its
predictions; and ``overhead_allowed``, the slowdown mode="auto"'s selection
may spend under one. The identity (all defaults) changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from offload_pass.planning.blocks import BlockCut
from offload_pass.planning.cost_model import DeviceProfile
from offload_pass.planning.step_model import NodeTimes, StepPrediction
from offload_pass.units import format_bytes

__all__ = ["REPLAN_TOLERANCE", "STALL_TOLERANCE", "Calibration", "overhead_allowed"]

# A plan counts as predicted where its step time and peak are within this
# share of the measured; past it the feedback loop fits a calibration.
REPLAN_TOLERANCE = 0.03
# The stalls on copies (what a plan adds to the step) count as predicted
# within this share of the step: a step predicted within REPLAN_TOLERANCE can
# still hide a stall several times max_overhead behind compute predicted
# long. Below it a stall is within the timer's noise.
STALL_TOLERANCE = 0.01


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
    # device's speed, spread over its runtime ops (feedback.fit).
    forward_op_ms: float = 0.0
    # ... of the backward (NodeTimes.backward_op_ms): what the plan's
    # measured backward took past plain Inductor's speed (feedback.fit).
    backward_op_ms: float = 0.0
    # Fitted in an earlier compile of the same graph and carried to this one
    # (feedback.memory.carried_calibration): its scales only, without the peak
    # offset and the time between forward and backward of the plan measured.
    carried: bool = False
    # mode="auto": plain Inductor's forward and backward of this graph as
    # measured beside the plan (PredictionCheck.plain), the step max_overhead
    # is held to (``overhead_allowed``); None: not measured.
    plain_work_ms: Optional[float] = None
    # What the memory timeline missed at the peak of each partition a plan
    # of this graph was measured on, by the recompute level it was
    # partitioned under (None: the first partition, as configured), in the
    # order measured. The offset is the partition's, not the device's: one
    # partition's miss does not predict another's peak.
    partition_offsets: tuple[tuple[Optional[float], int], ...] = ()

    def offset_for(self, level: Optional[float]) -> int:
        """The bytes a plan on the partition of recompute ``level`` adds to
        its memory timeline's peak: what that partition measured, where one
        of its plans was, else what the measured partition of the nearest
        level did (the first partition counted as level 1.0; of two as
        near, the one measured later), 0 where no peak was measured.
        Nearest, because neighbouring levels recompute much the same."""
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


def _level_value(level: object) -> float:
    """A partition's recompute level as a number: the first partition's
    (None, as configured) is PyTorch's default budget, 1.0; a block cut's,
    the share of the blocks it leaves to the partitioner (every block cut
    is nearest level 0, where PyTorch recomputes the whole forward), times
    the level those blocks are partitioned under (``BlockCut.rest``)."""
    if level is None:
        return 1.0
    if isinstance(level, BlockCut):
        return (1.0 - level.count / level.of) * (1.0 if level.rest is None else level.rest)
    return float(level)


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
    offload carries the simulator's error into it."""
    if calibration is None or calibration.plain_work_ms is None:
        return max_overhead
    predicted = without_offload.step_ms - without_offload.between_ms
    if predicted <= 0:
        return max_overhead
    return (1 + max_overhead) * calibration.plain_work_ms / predicted - 1


