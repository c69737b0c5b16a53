"""Simulated device-memory timeline of one training step.

Takes: a forward and a backward graph module (before or after the rewrite).
Gives: the bytes of device tensors alive after each node of the forward, then
of the backward, from the fake tensors' sizes and the graphs' last uses (views
share their base's storage; host tensors do not count; parameters and graph
inputs are outside the step and do not count either). The plan uses the
difference of two such peaks as the reduction it expects, the measured one is
compared against (R), and the memory-timeline notebook draws it where there
is no GPU.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx

from .annotations import is_view_node, storage_root

__all__ = ["Timeline", "simulate_step"]


@dataclasses.dataclass
class Timeline:
    phases: list[str]  # "forward" / "backward", per point
    nodes: list[str]  # node name per point
    live_bytes: list[int]  # device bytes alive after that node
    events: list[tuple[int, str, str]]  # (point, "offload"/"release"/"reload"/"wait", tensor)

    @property
    def peak(self) -> int:
        return max(self.live_bytes, default=0)

    @property
    def peak_index(self) -> int:
        return self.live_bytes.index(self.peak) if self.live_bytes else 0

    @property
    def forward_end(self) -> int:
        """Bytes alive when the forward returns (what backward starts with)."""
        idx = [i for i, p in enumerate(self.phases) if p == "forward"]
        return self.live_bytes[idx[-1]] if idx else 0


_EVENT_OPS = {
    "offload": "offload",
    "release": "release",
    "reload": "reload",
    "wait_reload": "wait",
}


def _storage_bytes(val: object) -> int:
    """Bytes of a tensor's storage; a symbolic size counts by its hint
    (no guard is added, so the graph is not specialized)."""
    try:
        nbytes = val.untyped_storage().nbytes()  # type: ignore[union-attr]
    except Exception:
        return 0
    if isinstance(nbytes, int):
        return nbytes
    hint = getattr(getattr(nbytes, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else 0


def _allocates(node: fx.Node, count_cpu: bool) -> int:
    """Bytes of new device storage that ``node`` allocates (0 for views,
    multi-output producers whose getitems own the outputs, and host copies)."""
    if node.op != "call_function" or is_view_node(node):
        return 0
    if node.target is torch.ops.offload_pass.offload.default:
        return 0
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    if val.device.type == "cpu" and not count_cpu:
        return 0
    return _storage_bytes(val)


def _walk(graph: fx.Graph, phase: str, inputs: dict[str, int], timeline: Timeline, count_cpu: bool) -> dict[str, int]:
    nodes = list(graph.nodes)
    root = {n: storage_root(n)[0] for n in nodes if n.op != "output"}
    last_use: dict[fx.Node, int] = {}
    for i, node in enumerate(nodes):
        for arg in node.all_input_nodes:
            last_use[root[arg]] = i
    live: dict[fx.Node, int] = {}
    for node in nodes:
        if node.op == "placeholder" and inputs.get(node.name):
            live[node] = inputs[node.name]
    carried: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.op == "output":
            for out in node.all_input_nodes:
                if root[out] in live:
                    carried[out.name] = live[root[out]]
            break
        size = _allocates(node, count_cpu)
        if size:
            live[node] = size
        for n in [n for n in live if last_use.get(n, -1) <= i]:
            del live[n]
        for op_name, event in _EVENT_OPS.items():
            if node.target is getattr(torch.ops.offload_pass, op_name).default:
                timeline.events.append((len(timeline.nodes), event, node.args[0].name))
        timeline.phases.append(phase)
        timeline.nodes.append(node.name)
        timeline.live_bytes.append(sum(live.values()))
    return carried


def simulate_step(fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, count_cpu: bool = False) -> Timeline:
    """Device bytes alive along forward then backward. ``count_cpu`` counts
    CPU tensors as device memory (CPU-only runs), the pass's host copies aside."""
    timeline = Timeline([], [], [], [])
    # What the forward returns and backward receives under the same name
    # starts the backward alive; host copies were never counted.
    carried = _walk(fw_gm.graph, "forward", {}, timeline, count_cpu)
    _walk(bw_gm.graph, "backward", carried, timeline, count_cpu)
    return timeline
