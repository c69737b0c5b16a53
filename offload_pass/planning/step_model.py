"""The step simulator: the one predicted step time and peak of a
forward/backward pair, the figures every report quotes.

Takes: the forward and backward graphs as they will run (after the rewrite,
or before it for the step without offload), their memory timeline
(``timeline.simulate_step``), the time of each node (``NodeTimes``) and the
copy bandwidths of a ``DeviceProfile``. Gives: a ``StepPrediction``.

Streams: the compute stream runs the nodes in graph order. ``offload`` queues
its copy on the device->host stream from where the compute stream reaches
it; ``release`` waits for that copy to land. ``reload`` queues on the
host->device stream behind the compute stream's work so far; ``wait_reload``
waits for it. The step is the compute stream's end; the peak is the
timeline's.

Host clock: the host issues the nodes in order, each after its own host
time (a launch, an extern kernel's measured call, a runtime op's Python and
copies, ``RUNTIME_OP_LAUNCHES``), and no node runs before it is issued: where
the device outruns the host the compute stream idles, and a copy's host time
is step time. Each phase starts with the host no further ahead than the
compute stream (a lead built over the forward is not carried into the
backward), with offload and without. A calibration may add a time per
runtime op of each phase (``NodeTimes.forward_op_ms`` / ``backward_op_ms``).

``NodeTimes`` come from the cost model's estimates (``estimate_node_ms``),
the extern kernels' measured on CUDA (``kernel_timing``); nodes the rewrite
adds cost no compute time. The selection searches with a coarser model of
the same streams (``selection_model``); its numbers choose, this one reports.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.fx as fx

from offload_pass.planning.cost_model import DeviceProfile, estimate_node_ms
from offload_pass.planning.kernel_timing import measured_kernel_times
from offload_pass.planning.timeline import Timeline, storage_bytes
from offload_pass.views import storage_root

_ops = torch.ops.offload_pass

__all__ = ["RUNTIME_OP_LAUNCHES", "NodeTimes", "StepPrediction", "copy_op_costs", "node_times", "predict_step"]

# The host's time of each runtime op, in small-kernel launches
# (``DeviceProfile.host_launch_us``), as ``benchmarks/op_host_cost.py``
# measures them against one ``aten.add``; a calibration scales them with the
# rest of the host.
RUNTIME_OP_LAUNCHES = {"offload": 4.0, "release": 0.85, "reload": 2.85, "wait_reload": 0.55}


_RUNTIME_TARGETS: dict = {}


def _runtime_op(node: fx.Node) -> Optional[str]:
    """The runtime op ``node`` calls (a key of ``RUNTIME_OP_LAUNCHES``), or
    None (other ops of the namespace, e.g. the example GroupedMLP's, are
    compute)."""
    if not _RUNTIME_TARGETS:
        _RUNTIME_TARGETS.update({getattr(_ops, name).default: name for name in RUNTIME_OP_LAUNCHES})
    return _RUNTIME_TARGETS.get(node.target) if node.op == "call_function" else None


@dataclasses.dataclass(frozen=True)
class NodeTimes:
    """Milliseconds per node name, forward and backward, on the device and
    on the host, and where they came from. ``launch_forward_ms`` /
    ``launch_backward_ms``: the host's time of one small-kernel launch in
    each graph, the unit of ``RUNTIME_OP_LAUNCHES`` (one per phase: a
    calibration scales each phase's host as a whole)."""

    forward: dict[str, float]
    backward: dict[str, float]
    source: str
    host_forward: dict[str, float] = dataclasses.field(default_factory=dict)
    host_backward: dict[str, float] = dataclasses.field(default_factory=dict)
    launch_forward_ms: float = 0.0
    launch_backward_ms: float = 0.0
    # The compute stream's time per runtime op of the forward beyond what
    # the host clock gives it (a calibration's ``forward_op_ms``; 0: none).
    forward_op_ms: float = 0.0
    backward_op_ms: float = 0.0  # ... of the backward (reload, wait_reload)

    def ordered(self, gm: fx.GraphModule, phase: str) -> list[float]:
        """Per node of ``gm`` in graph order (output aside): the points of
        ``timeline.simulate_step``. A node without a time (added by the
        rewrite) costs 0."""
        times = self.forward if phase == "forward" else self.backward
        return [times.get(n.name, 0.0) for n in gm.graph.nodes if n.op != "output"]

    def host_ordered(self, gm: fx.GraphModule, phase: str) -> list[float]:
        """The host's time per node of ``gm``, as ``ordered``: the runtime ops
        the rewrite added cost ``RUNTIME_OP_LAUNCHES`` launches each."""
        times, launch = (
            (self.host_forward, self.launch_forward_ms) if phase == "forward"
            else (self.host_backward, self.launch_backward_ms)
        )
        out = []
        for n in gm.graph.nodes:
            if n.op == "output":
                continue
            runtime = _runtime_op(n)
            out.append(RUNTIME_OP_LAUNCHES[runtime] * launch if runtime else times.get(n.name, 0.0))
        return out


def node_times(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, profile: DeviceProfile, measure_kernels: bool = False
) -> NodeTimes:
    """Every node of both graphs (before the rewrite): the cost model's
    estimate, or with ``measure_kernels`` (a CUDA graph) the measured time of
    each extern kernel (``kernel_timing``) and the estimate of the rest. On
    the host each node that launches a kernel (a time above 0) costs one
    launch (``DeviceProfile.host_launch_us``), a measured extern kernel its
    measured host time."""
    measured = 0
    launch_ms = profile.host_launch_us / 1e3

    def by_name(gm: fx.GraphModule) -> tuple[dict[str, float], dict[str, float]]:
        nonlocal measured
        times = {n.name: ms for n, ms in zip(gm.graph.nodes, estimate_node_ms(gm, profile))}
        host = {name: launch_ms for name, ms in times.items() if ms > 0 and launch_ms}
        if measure_kernels:
            kernels = measured_kernel_times(gm)
            times.update({name: k.device_ms for name, k in kernels.items()})
            if launch_ms:
                host.update({name: k.host_ms for name, k in kernels.items()})
            measured += len(kernels)
        return times, host

    (forward, host_forward), (backward, host_backward) = by_name(fw_gm), by_name(bw_gm)
    source = f"estimated ({profile.source})"
    if measure_kernels:
        source = f"{measured} extern kernels measured, the rest {source}"
    return NodeTimes(forward, backward, source, host_forward, host_backward, launch_ms, launch_ms)


def copy_op_costs(times: NodeTimes, fw_gm: fx.GraphModule) -> dict:
    """What one copy's runtime ops cost as this simulator charges them, for
    the selection's search model over ``fw_gm`` before the rewrite
    (``selection.StepWithoutOffload``'s ``copy_ms``, ``reload_ms``,
    ``copy_host_ms``, ``fw_host_ms``): two ops in each phase (offload and
    release, reload and wait_reload), each the compute stream's
    ``forward_op_ms`` / ``backward_op_ms``, the host's launches of the
    forward's two, and the host's time per forward node."""
    return {
        "copy_ms": 2 * times.forward_op_ms,
        "reload_ms": 2 * times.backward_op_ms,
        "copy_host_ms": (RUNTIME_OP_LAUNCHES["offload"] + RUNTIME_OP_LAUNCHES["release"]) * times.launch_forward_ms,
        "fw_host_ms": times.host_ordered(fw_gm, "forward"),
    }


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
    forward_idle_ms: float = 0.0  # compute stream idle, the host not having issued its next node
    backward_idle_ms: float = 0.0
    # The host clock's time to issue each graph's nodes (a sum of node host
    # times; ``MeasuredCall.host_forward_ms`` is the host's wall time, which
    # holds more: the calibration compares the two).
    forward_issue_ms: float = 0.0
    backward_issue_ms: float = 0.0
    forward_ops: int = 0  # runtime ops in the forward (offloads, releases)
    backward_ops: int = 0  # ... in the backward (reloads, wait_reloads)

    @property
    def timeline_peak(self) -> int:
        """The memory timeline's own peak, without a calibration's offset."""
        return self.peak - self.peak_offset

    def describe(self) -> str:
        waits = ""
        if round(self.forward_wait_ms + self.backward_wait_ms, 2):
            waits = f", waiting for copies {self.forward_wait_ms:.2f} + {self.backward_wait_ms:.2f} ms"
        if round(self.forward_idle_ms + self.backward_idle_ms, 2):
            waits += f", for the host {self.forward_idle_ms:.2f} + {self.backward_idle_ms:.2f} ms"
        return (
            f"step {self.step_ms:.2f} ms (compute forward {self.forward_ms:.2f}, "
            f"backward {self.backward_ms:.2f} ms{waits}; node times {self.times})"
        )


@dataclasses.dataclass
class _Streams:
    """The three streams' clocks and the host's (ms), and the copies in flight."""

    d2h_bytes_per_ms: float
    h2d_bytes_per_ms: float
    compute: float = 0.0
    d2h: float = 0.0
    h2d: float = 0.0
    host: float = 0.0  # when the host has issued the nodes so far
    landed: dict[str, float] = dataclasses.field(default_factory=dict)  # host copy -> copy-out landed
    reloaded: dict[str, float] = dataclasses.field(default_factory=dict)  # reload node -> landed

    def wait(self, until: Optional[float]) -> float:
        waited = max(0.0, (until or 0.0) - self.compute)
        self.compute += waited
        return waited

    def issued(self) -> float:
        """The compute stream idles until the host has issued its next node."""
        return self.wait(self.host)


def _copy_bytes(node: fx.Node) -> int:
    return storage_bytes(node.meta.get("val"))


@dataclasses.dataclass
class _Phase:
    compute: float = 0.0  # ms of the nodes' own time
    waited: float = 0.0  # the compute stream waiting for copies
    idle: float = 0.0  # ... for the host
    host: float = 0.0  # the host's time over the nodes
    ops: int = 0  # runtime ops


def _run(
    gm: fx.GraphModule,
    times: list[float],
    host_times: list[float],
    streams: _Streams,
    op_ms: float = 0.0,
    runtime_ops: bool = True,
) -> _Phase:
    """Advance ``streams`` over ``gm``; ``op_ms``: the compute stream's time
    at each runtime op past the host clock's (``NodeTimes.forward_op_ms`` /
    ``backward_op_ms``); ``runtime_ops`` False: the runtime ops skipped, as
    if the graph ran without offload."""
    phase = _Phase()
    nodes = [n for n in gm.graph.nodes if n.op != "output"]
    for node, ms, host_ms in zip(nodes, times, host_times):
        if not runtime_ops and _runtime_op(node):
            continue
        streams.host += host_ms
        phase.host += host_ms
        # Where the compute stream stands once the host has issued the node
        # (an event recorded there completes then; a copy queued behind it
        # starts then at the earliest).
        reached = max(streams.compute, streams.host)
        runtime = _runtime_op(node)
        if runtime == "offload":
            streams.d2h = max(reached, streams.d2h) + _copy_bytes(node) / streams.d2h_bytes_per_ms
            streams.landed[node.name] = streams.d2h
        elif runtime == "release":
            phase.idle += streams.issued()
            phase.waited += streams.wait(streams.landed.get(node.args[1].name))
        elif runtime == "reload":
            streams.h2d = max(reached, streams.h2d) + _copy_bytes(node) / streams.h2d_bytes_per_ms
            streams.reloaded[node.name] = streams.h2d
        elif runtime == "wait_reload":
            phase.idle += streams.issued()
            phase.waited += streams.wait(streams.reloaded.get(storage_root(node.args[0])[0].name))
        elif ms > 0:
            phase.idle += streams.issued()
            streams.compute += ms
            phase.compute += ms
        if runtime:
            phase.ops += 1
            # What the device measurably loses to each runtime op past the
            # host clock (a calibration's fit): idle, not compute.
            streams.compute += op_ms
            phase.idle += op_ms
    return phase


def predict_step(
    fw_gm: fx.GraphModule,
    bw_gm: fx.GraphModule,
    timeline: Timeline,
    times: NodeTimes,
    profile: DeviceProfile,
    peak_offset: int = 0,
    between_ms: float = 0.0,
    runtime_ops: bool = True,
) -> StepPrediction:
    """The predicted step of these graphs (see the module docstring).
    ``peak_offset``: the bytes a calibration found the timeline missing at
    the measured peak (``calibration.Calibration``), added to its peak;
    ``between_ms``: the time it measured between the forward's end and the
    backward's start (the copies run on through it); ``runtime_ops`` False:
    the step of these graphs without their runtime ops, the step without
    offload's time (the peak stays the timeline's, with the copies)."""
    streams = _Streams(profile.bytes_per_ms("d2h"), profile.bytes_per_ms("h2d"))
    forward = _run(
        fw_gm, times.ordered(fw_gm, "forward"), times.host_ordered(fw_gm, "forward"), streams, times.forward_op_ms,
        runtime_ops,
    )
    streams.compute += between_ms
    streams.host = max(streams.host, streams.compute)
    backward = _run(
        bw_gm, times.ordered(bw_gm, "backward"), times.host_ordered(bw_gm, "backward"), streams, times.backward_op_ms,
        runtime_ops,
    )
    return StepPrediction(
        streams.compute, timeline.peak + peak_offset, forward.compute, backward.compute, forward.waited,
        backward.waited, times.source, peak_offset, between_ms, forward.idle, backward.idle, forward.host,
        backward.host, forward.ops, backward.ops,
    )
