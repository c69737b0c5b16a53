"""The step simulator: the one predicted step time and peak of a
forward/backward pair, the figures every report quotes.

Takes: the forward and backward graphs as they will run (after the rewrite,
or before it for the step without offload), their memory timeline
(``timeline.simulate_step``), the time of each node (``NodeTimes``) and the
copy bandwidths of a ``DeviceProfile``. Gives: a ``StepPrediction``.

The model follows the runtime ops (``runtime/ops.py``) in graph order. The
compute stream runs the nodes one after the other. ``offload`` queues its
copy on the device->host stream behind the copies before it, from the moment
the compute stream reaches it; ``release`` makes the compute stream wait for
that copy to land. ``reload`` queues on the host->device stream behind the
compute stream's work so far (every copy-out has a release in the forward,
``rewriting/invariants.py`` checks it, so its copy has landed by then);
``wait_reload`` makes the compute stream wait for it. The step is the compute stream's end;
the peak is the timeline's (the same graphs, so the same points).

``NodeTimes`` come from the cost model's estimates (``estimate_node_ms``),
the extern kernels' measured on CUDA (``kernel_timing``, unless
``OffloadConfig.measure_kernels=False``); nodes the rewrite adds cost no
compute time. The selection (``selection``)
searches with a coarser model of the same streams over the graphs before the
rewrite; its numbers choose, this one reports.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.fx as fx

from offload_pass.planning.cost_model import DeviceProfile, estimate_node_ms
from offload_pass.planning.kernel_timing import measured_kernel_ms
from offload_pass.planning.timeline import Timeline, storage_bytes
from offload_pass.views import storage_root

__all__ = ["NodeTimes", "StepPrediction", "node_times", "predict_step"]


@dataclasses.dataclass(frozen=True)
class NodeTimes:
    """Milliseconds per node name, forward and backward, and where they came from."""

    forward: dict[str, float]
    backward: dict[str, float]
    source: str

    def ordered(self, gm: fx.GraphModule, phase: str) -> list[float]:
        """Per node of ``gm`` in graph order (output aside): the points of
        ``timeline.simulate_step``. A node without a time (added by the
        rewrite) costs 0."""
        times = self.forward if phase == "forward" else self.backward
        return [times.get(n.name, 0.0) for n in gm.graph.nodes if n.op != "output"]


def node_times(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, profile: DeviceProfile, measure_kernels: bool = False
) -> NodeTimes:
    """Every node of both graphs (before the rewrite): the cost model's
    estimate, or with ``measure_kernels`` (a CUDA graph) the measured time of
    each extern kernel (``kernel_timing``) and the estimate of the rest."""
    measured = 0

    def by_name(gm: fx.GraphModule) -> dict[str, float]:
        nonlocal measured
        times = {n.name: ms for n, ms in zip(gm.graph.nodes, estimate_node_ms(gm, profile))}
        if measure_kernels:
            kernels = measured_kernel_ms(gm)
            times.update(kernels)
            measured += len(kernels)
        return times

    forward, backward = by_name(fw_gm), by_name(bw_gm)
    source = f"estimated ({profile.source})"
    if measure_kernels:
        source = f"{measured} extern kernels measured, the rest {source}"
    return NodeTimes(forward, backward, source)


@dataclasses.dataclass(frozen=True)
class StepPrediction:
    step_ms: float  # forward + backward compute + the waits below + between_ms
    peak: int  # device bytes: the memory timeline's highest point, plus peak_offset
    forward_ms: float  # compute of the forward graph, copies aside
    backward_ms: float
    forward_wait_ms: float  # compute stream waiting for copies to land (releases)
    backward_wait_ms: float  # compute stream waiting for reloads
    times: str  # NodeTimes.source
    peak_offset: int = 0  # bytes a calibration adds to the timeline's peak (planning/calibration.py)
    between_ms: float = 0.0  # a calibration's measured time between forward and backward

    @property
    def timeline_peak(self) -> int:
        """The memory timeline's own peak, without a calibration's offset."""
        return self.peak - self.peak_offset

    def describe(self) -> str:
        waits = ""
        if round(self.forward_wait_ms + self.backward_wait_ms, 2):
            waits = f", waiting for copies {self.forward_wait_ms:.2f} + {self.backward_wait_ms:.2f} ms"
        return (
            f"step {self.step_ms:.2f} ms (compute forward {self.forward_ms:.2f}, "
            f"backward {self.backward_ms:.2f} ms{waits}; node times {self.times})"
        )


@dataclasses.dataclass
class _Streams:
    """The three streams' clocks (ms) and the copies in flight."""

    d2h_bytes_per_ms: float
    h2d_bytes_per_ms: float
    compute: float = 0.0
    d2h: float = 0.0
    h2d: float = 0.0
    landed: dict[str, float] = dataclasses.field(default_factory=dict)  # host copy -> copy-out landed
    reloaded: dict[str, float] = dataclasses.field(default_factory=dict)  # reload node -> landed

    def wait(self, until: Optional[float]) -> float:
        waited = max(0.0, (until or 0.0) - self.compute)
        self.compute += waited
        return waited


def _copy_bytes(node: fx.Node) -> int:
    return storage_bytes(node.meta.get("val"))


def _run(gm: fx.GraphModule, times: list[float], streams: _Streams) -> tuple[float, float]:
    """Advance ``streams`` over ``gm``; returns (compute ms, wait ms)."""
    ops = torch.ops.offload_pass
    compute = waited = 0.0
    nodes = [n for n in gm.graph.nodes if n.op != "output"]
    for node, ms in zip(nodes, times):
        if node.target is ops.offload.default:
            streams.d2h = max(streams.compute, streams.d2h) + _copy_bytes(node) / streams.d2h_bytes_per_ms
            streams.landed[node.name] = streams.d2h
        elif node.target is ops.release.default:
            waited += streams.wait(streams.landed.get(node.args[1].name))
        elif node.target is ops.reload.default:
            streams.h2d = max(streams.compute, streams.h2d) + _copy_bytes(node) / streams.h2d_bytes_per_ms
            streams.reloaded[node.name] = streams.h2d
        elif node.target is ops.wait_reload.default:
            waited += streams.wait(streams.reloaded.get(storage_root(node.args[0])[0].name))
        else:
            streams.compute += ms
            compute += ms
    return compute, waited


def predict_step(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    timeline: Timeline,
    times: NodeTimes,
    profile: DeviceProfile,
    peak_offset: int = 0,
    between_ms: float = 0.0,
) -> StepPrediction:
    """The predicted step of these graphs (see the module docstring).
    ``peak_offset``: the bytes a calibration found the timeline missing at
    the measured peak (``calibration.Calibration``), added to its peak;
    ``between_ms``: the time it measured between the forward's end and the
    backward's start (the copies run on through it)."""
    streams = _Streams(profile.bytes_per_ms("d2h"), profile.bytes_per_ms("h2d"))
    forward_ms, forward_wait = _run(fw_gm, times.ordered(fw_gm, "forward"), streams)
    streams.compute += between_ms
    backward_ms, backward_wait = _run(bw_gm, times.ordered(bw_gm, "backward"), streams)
    return StepPrediction(
        streams.compute, timeline.peak + peak_offset, forward_ms, backward_ms, forward_wait, backward_wait,
        times.source, peak_offset, between_ms,
    )
