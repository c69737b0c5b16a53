"""Simulated device-memory timeline of one training step.

Takes: a forward and a backward graph module (before or after the rewrite).
Gives: the bytes of device tensors alive after each node of the forward, then
of the backward, from the fake tensors' sizes and the graphs' last uses (views
share their base's storage; host tensors do not count; parameters and graph
inputs are outside the step and do not count either; a pointwise result whose
users all fuse it, as Inductor does, is never in memory and keeps its inputs
alive until those users run). The plan uses the
difference of two such peaks as the reduction it expects, the measured one is
compared against (R), and the memory-timeline notebook draws it where there
is no GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

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


def _fusable(node: fx.Node) -> bool:
    """Pointwise ops and views: Inductor fuses them into their consumers."""
    if node.op != "call_function":
        return False
    if is_view_node(node):
        return True
    tags = getattr(node.target, "tags", ())
    return torch.Tag.pointwise in tags


def _read_in_memory(node: fx.Node) -> bool:
    """Does some consumer need ``node``'s value written to memory: the graph
    output, an op Inductor does not fuse (matmuls, attention, custom ops), or
    a view through which one of those reads it."""
    for user in node.users:
        if user.op != "call_function":
            return True
        if is_view_node(user):
            if _read_in_memory(user):
                return True
            continue
        tags = getattr(user.target, "tags", ())
        if not (_fusable(user) or torch.Tag.reduction in tags):
            return True
    return False


def fused_away(node: fx.Node) -> bool:
    """A pointwise result that Inductor never writes to memory: every
    consumer, directly or through views, fuses it (pointwise ops,
    reductions)."""
    if node.op != "call_function" or is_view_node(node) or not _fusable(node) or not node.users:
        return False
    return not _read_in_memory(node)


def _extern(node: fx.Node) -> bool:
    """An op Inductor runs as its own kernel, never fused with its
    neighbours: matmuls, attention, custom ops (and the graph's inputs)."""
    if node.op == "placeholder":
        return True
    if node.op != "call_function" or node.target.__module__ == "_operator":
        return False
    tags = getattr(node.target, "tags", ())
    return not (_fusable(node) or torch.Tag.reduction in tags)


def safe_slots(nodes: Sequence[fx.Node]) -> list[bool]:
    """``slots[i]``: may an op go right after ``nodes[i]`` without landing
    inside a fused kernel? A custom op between two pointwise ops that
    Inductor would fuse splits their kernel: one more round trip to memory,
    and in low precision a different rounding of the intermediate. Right
    after or right before an extern op there is no kernel to split."""
    return [
        _extern(node) or (i + 1 < len(nodes) and _extern(nodes[i + 1])) or i + 1 == len(nodes)
        for i, node in enumerate(nodes)
    ]


def _walk(
    graph: fx.Graph, phase: str, inputs: dict[str, tuple[str, int]], timeline: Timeline, count_cpu: bool
) -> dict[str, tuple[str, int]]:
    """``inputs``: placeholder name -> (storage key, bytes) of what the
    previous graph handed over alive; placeholders with one key (views of one
    forward storage) are one allocation. Returns the same for the outputs."""
    nodes = list(graph.nodes)
    root = {n: storage_root(n)[0] for n in nodes if n.op != "output"}

    def key(node: fx.Node) -> object:
        r = root[node]
        return inputs[r.name][0] if r.op == "placeholder" and r.name in inputs else r

    last_use: dict[object, int] = {}
    for i, node in enumerate(nodes):
        for arg in node.all_input_nodes:
            last_use[key(arg)] = i
    # A fused-away result is computed inside its consumers' kernels, which
    # therefore read its inputs: their lifetime extends to those consumers.
    fused = {n for n in nodes if fused_away(n)}
    for node in reversed(nodes):
        if node in fused and node in last_use:
            for arg in node.all_input_nodes:
                k = key(arg)
                last_use[k] = max(last_use.get(k, -1), last_use[node])
    live: dict[object, int] = {}
    for node in nodes:
        if node.op == "placeholder" and node.name in inputs and inputs[node.name][1]:
            live[key(node)] = inputs[node.name][1]
    carried: dict[str, tuple[str, int]] = {}
    for i, node in enumerate(nodes):
        if node.op == "output":
            for out in node.all_input_nodes:
                k = key(out)
                if k in live:
                    carried[out.name] = (k if isinstance(k, str) else f"{phase}:{k.name}", live[k])
            break
        size = 0 if node in fused else _allocates(node, count_cpu)
        if size:
            live[node] = size
        for k in [k for k in live if last_use.get(k, -1) <= i]:
            del live[k]
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


def offload_intervals(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, groups: Sequence
) -> dict[str, tuple[int, int]]:
    """For each offload group (``plan.OffloadGroup``), the points ``[a, b)`` of
    ``simulate_step``'s timeline where its bytes would be off the device:
    from after the last forward use of its storage to the first backward use
    of any member (a reload landing just in time)."""
    fw_nodes = [n for n in fw_gm.graph.nodes if n.op != "output"]
    bw_nodes = [n for n in bw_gm.graph.nodes if n.op != "output"]
    fw_index = {n: i for i, n in enumerate(fw_nodes)}
    by_name = {n.name: n for n in fw_nodes}
    bw_index = {n: i for i, n in enumerate(bw_nodes)}
    placeholders = {n.name: n for n in bw_nodes if n.op == "placeholder"}
    roots = {n: storage_root(n)[0] for n in fw_nodes}
    last_fw_use: dict[fx.Node, int] = {}
    for node in fw_nodes:
        for arg in node.all_input_nodes:
            last_fw_use[roots[arg]] = fw_index[node]
    intervals = {}
    for group in groups:
        root = roots[by_name[group.members[0]]]
        start = max(fw_index[root], last_fw_use.get(root, -1)) + 1
        uses = [
            bw_index[u]
            for m in group.members
            if m in placeholders
            for u in placeholders[m].users
            if u in bw_index
        ]
        end = len(fw_nodes) + (min(uses) if uses else len(bw_nodes))
        intervals[group.storage] = (start, end)
    return intervals
