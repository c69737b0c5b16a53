"""The step the offload selection searches over, and the copies it chooses among.

Takes: plain numbers: node times of the forward and backward graphs, device
bytes alive at each point without offload, copy bandwidths, the runtime ops'
costs and the reload bounds; the copies' lifetimes. Gives
``StepWithoutOffload`` (with its clocks computed once: the searches simulate
thousands of sets over one step), ``Candidate`` (one copy the selection may
make), ``candidates(lifetimes)`` and ``Estimate`` (the search model's step
time and peak of one set).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence, Union

import numpy as np

from offload_pass.planning.lifetimes import CopyLifetime
from offload_pass.planning.reload_points import node_starts

__all__ = ["Candidate", "Estimate", "StepWithoutOffload", "candidates"]


@dataclasses.dataclass(frozen=True)
class Candidate:
    key: str  # the copy's storage name
    nbytes: int
    produced: int  # forward node index of its producer
    free_from: int  # forward node index of its last forward use
    consumer: int  # backward node index of its first consumer (len(bw) if none)


@dataclasses.dataclass(frozen=True)
class Estimate:
    step_ms: float
    peak: int
    forward_wait_ms: float
    backward_wait_ms: float
    # Device bytes at each point, the copies made (an array: the searches
    # sum over it at every step).
    after: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64), compare=False)

    def excess(self, level: int) -> int:
        """Bytes over ``level``, summed over the points: what a budget still
        has to lose. Unlike the peak, a copy that covers some of several
        points at the peak lowers it."""
        over = self.after - level
        return int(over[over > 0].sum())


@dataclasses.dataclass(frozen=True)
class StepWithoutOffload:
    fw_ms: Sequence[float]  # per forward point
    bw_ms: Sequence[float]  # per backward point
    live: Sequence[int]  # bytes alive at each forward point, then each backward point
    d2h_bytes_per_ms: float
    h2d_bytes_per_ms: float
    # What each copy's runtime ops cost, as the step simulator charges them
    # (``step_model``; 0 and empty: nothing): the compute stream's time at
    # its forward ops (offload, release: a calibration's ``forward_op_ms``
    # each) and at its backward ops (reload, wait_reload), and the host's
    # time to issue its forward ops, which idles the device where the host
    # is not ahead of it (``fw_host_ms``: the host's time per forward point).
    # Without them the search would choose sets the step simulator then puts
    # over the limit.
    copy_ms: float = 0.0
    reload_ms: float = 0.0
    copy_host_ms: float = 0.0
    fw_host_ms: Sequence[float] = ()
    # What bounds the reloads, as the rewrite bounds them
    # (``schedules.reload_ceiling``, ``OffloadConfig.prefetch_bytes``): the
    # headroom over the ideal's peak (bytes, or a share of the bytes
    # offloaded), a budget they may not lift memory past, the bytes of
    # reloads in flight. Without them the search would start every reload
    # as early as the host->device stream needs, memory no object, and
    # predict peaks the rewrite never reaches.
    reload_headroom: Union[int, float] = 0
    reload_target: Optional[int] = None
    prefetch_bytes: Optional[int] = None

    # The clocks of the step without offload, computed once: the searches
    # simulate thousands of sets over the same step.
    @functools.cached_property
    def live_array(self) -> np.ndarray:
        """``live`` as an array, for the searches' sums over the step (read-only: shared by every estimate)."""
        live = np.array(self.live, dtype=np.int64)
        live.setflags(write=False)
        return live

    @functools.cached_property
    def fw_end(self) -> list[float]:
        """The end of each forward node, from the forward's start."""
        return _ends(self.fw_ms)

    @functools.cached_property
    def bw_end(self) -> list[float]:
        return _ends(self.bw_ms)

    @functools.cached_property
    def bw_start(self) -> list[float]:
        return [e - t for e, t in zip(self.bw_end, self.bw_ms)]

    @functools.cached_property
    def bw_node_starts(self) -> np.ndarray:
        """``reload_points.node_starts`` of the backward, as an array (read-only)."""
        starts = np.array(node_starts(self.bw_ms), dtype=np.float64)
        starts.setflags(write=False)
        return starts

    @functools.cached_property
    def host_bound(self) -> "_RangeMax":
        """Per forward point k that runs on the device: when the host has
        issued it plus the device's time from it to the forward's end, the
        earliest the forward can end through k (the device starts no node
        before the host issued it); -inf elsewhere. The forward's end is
        the largest of these and the device's own time."""
        total = self.fw_end[-1] if self.fw_ms else 0.0
        bound, host = [], 0.0
        for ms, end, host_ms in zip(self.fw_ms, self.fw_end, self.fw_host_ms):
            host += host_ms
            bound.append(host + total - (end - ms) if ms > 0 else float("-inf"))
        return _RangeMax(bound)


class _RangeMax:
    """The largest of ``values[a..b]`` in constant time (a sparse table)."""

    def __init__(self, values: Sequence[float]):
        self.levels = [list(values)]
        width = 1
        while 2 * width <= len(values):
            below = self.levels[-1]
            self.levels.append([max(below[i], below[i + width]) for i in range(len(values) - 2 * width + 1)])
            width *= 2

    def __call__(self, a: int, b: int) -> float:
        """The largest of points ``a`` to ``b``, both included; -inf where empty."""
        b = min(b, len(self.levels[0]) - 1)
        if a > b:
            return float("-inf")
        level = (b - a + 1).bit_length() - 1
        row = self.levels[level]
        return max(row[a], row[b - (1 << level) + 1])


def _ends(ms: Sequence[float]) -> list[float]:
    out, total = [], 0.0
    for t in ms:
        total += t
        out.append(total)
    return out


def candidates(lifetimes: Sequence[CopyLifetime]) -> list[Candidate]:
    """The copies' lifetimes as ``Candidate``s, indexed like
    ``timeline.simulate_step``'s points (each graph's nodes, output aside)."""
    return [
        Candidate(
            lt.storage, lt.nbytes, lt.produced, lt.last_forward_use,
            lt.first_backward_use if lt.first_backward_use is not None else lt.backward_points,
        )
        for lt in lifetimes
    ]
