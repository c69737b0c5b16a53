"""Simulated device-memory timeline of one training step.

Takes: a forward and a backward graph module (before or after the rewrite).
Gives: the bytes of device tensors alive at each node of the forward, then of
the backward, from the fake tensors' sizes and the graphs' last uses. Views
share their base's storage; host tensors do not count, nor do the forward's
inputs (parameters, the batch: outside the step); the backward's tangents
count from its start to its end (the autograd engine holds them until the
backward returns); a pointwise result whose users all fuse it, as Inductor
does, is never in memory and keeps its inputs alive until those users run.
Each point is the most a node holds at once: its outputs and scratch memory
(``register_workspace``) on top of everything alive before it, its inputs
included; what dies there is freed after it. The plan takes the difference
of two such peaks as the reduction it expects, which the measured one is
compared against.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import operator
from typing import Callable, Optional

import torch
import torch.fx as fx

from offload_pass.planning.inductor_model import fused_away, is_extern
from offload_pass.planning.saved_set import is_tangent
from offload_pass.planning.workspace import workspace_bytes
from offload_pass.units import size_hint
from offload_pass.views import is_view_node, storage_root

__all__ = ["Timeline", "simulate_step", "storage_bytes"]


@dataclasses.dataclass
class Timeline:
    phases: list[str]  # "forward" / "backward", per point
    nodes: list[str]  # node name per point
    live_bytes: list[int]  # device bytes held while that node runs
    events: list[tuple[int, str, str]]  # (point, "offload"/"release"/"reload"/"wait", tensor)
    # With simulate_step(record_alive=True): per point, storage name -> bytes
    # alive there (for reports that say what makes a peak).
    alive: Optional[list[dict[str, int]]] = None

    @property
    def peak(self) -> int:
        return max(self.live_bytes, default=0)

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


def storage_bytes(val: object) -> int:
    """Bytes of a tensor's storage; a symbolic size counts by its hint
    (no guard is added, so the graph is not specialized)."""
    try:
        nbytes = val.untyped_storage().nbytes()  # type: ignore[union-attr]
    except Exception:
        return 0
    return size_hint(nbytes) or 0


def _allocates(node: fx.Node, count_cpu: bool) -> int:
    """Bytes of new device storage that ``node`` allocates (0 for views,
    multi-output producers whose getitems own the outputs, and host copies)."""
    if node.op != "call_function" or is_view_node(node):
        return 0
    if node.target is torch.ops.offload_pass.offload.default:
        return 0
    return _tensor_bytes(node.meta.get("val"), count_cpu)


def _returns_views(node: fx.Node) -> bool:
    """split / unbind / chunk: the outputs alias the input, nothing is allocated."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return any(r.alias_info is not None for r in target._schema.returns)


def _tensor_bytes(val: object, count_cpu: bool) -> int:
    if not isinstance(val, torch.Tensor) or (val.device.type == "cpu" and not count_cpu):
        return 0
    return storage_bytes(val)


def _last_uses(nodes: list[fx.Node], key: Callable[[fx.Node], object], fused: set[fx.Node]) -> dict[object, int]:
    """Storage key -> index of the last node reading it."""
    last_use: dict[object, int] = {}
    for i, node in enumerate(nodes):
        for arg in node.all_input_nodes:
            last_use[key(arg)] = i
    # A fused-away result is computed inside its consumers' kernels, which
    # therefore read its inputs: their lifetime extends to those consumers.
    for node in reversed(nodes):
        if node in fused and node in last_use:
            for arg in node.all_input_nodes:
                k = key(arg)
                last_use[k] = max(last_use.get(k, -1), last_use[node])
    return last_use


def _multi_output(
    node: fx.Node, fused: set[fx.Node], live: dict[object, int], born_early: set[fx.Node], count_cpu: bool
) -> int:
    """A multi-output op writes all its outputs at once: their getitems own
    them from here (added to ``live`` and ``born_early``); an output nobody
    reads lives only inside it: returns those bytes."""
    outputs = node.meta.get("val")
    if node.op != "call_function" or not isinstance(outputs, (tuple, list)) or _returns_views(node):
        return 0
    taken = set()
    for user in node.users:
        if user.target is operator.getitem and not is_view_node(user):
            taken.add(user.args[1])
            nbytes = 0 if user in fused else _allocates(user, count_cpu)
            if nbytes:
                live[user] = nbytes
                born_early.add(user)
    return sum(_tensor_bytes(v, count_cpu) for j, v in enumerate(outputs) if j not in taken)


def _alive_at_start(
    nodes: list[fx.Node], inputs: dict[str, tuple[str, int]], key: Callable[[fx.Node], object],
    last_use: dict[object, int], count_cpu: bool,
) -> dict[object, int]:
    """Storage key -> bytes alive before the graph's first node: what the
    previous graph handed over, and the gradients the backward receives
    (their last use moved past the graph's end in ``last_use``)."""
    live: dict[object, int] = {}
    for node in nodes:
        if node.op == "placeholder" and node.name in inputs and inputs[node.name][1]:
            live[key(node)] = inputs[node.name][1]
        elif is_tangent(node):
            nbytes = _tensor_bytes(node.meta.get("val"), count_cpu)
            if nbytes:
                # The gradients a backward receives (the loss's, and zeros for
                # other outputs such as logits or a KV cache) are allocated
                # before it runs and freed only when it returns, however early
                # the graph last reads them.
                live[key(node)] = nbytes
                last_use[key(node)] = len(nodes)
    return live


def _walk(
    graph: fx.Graph, phase: str, inputs: dict[str, tuple[str, int]], timeline: Timeline, count_cpu: bool
) -> dict[str, tuple[str, int]]:
    """``inputs``: placeholder name -> (storage key, bytes) of what the
    previous graph handed over alive; placeholders with one key (views of one
    forward storage) are one allocation. A tangent placeholder (a gradient
    the backward receives) is alive over the whole graph. Returns the same
    for the outputs."""
    nodes = list(graph.nodes)
    root = {n: storage_root(n)[0] for n in nodes if n.op != "output"}

    def key(node: fx.Node) -> object:
        r = root[node]
        return inputs[r.name][0] if r.op == "placeholder" and r.name in inputs else r

    fused = {n for n in nodes if fused_away(n)}
    last_use = _last_uses(nodes, key, fused)
    live = _alive_at_start(nodes, inputs, key, last_use, count_cpu)
    carried: dict[str, tuple[str, int]] = {}
    born_early: set[fx.Node] = set()
    # Each storage is listed by the node it dies after and the bytes alive are a running sum: hundreds
    # of saved tensors over thousands of nodes (an 8B-sized graph) are not looked at at every node.
    dies_at: dict[int, list[object]] = collections.defaultdict(list)
    for k in live:
        dies_at[max(last_use.get(k, -1), 0)].append(k)
    alive_bytes = sum(live.values())
    for i, node in enumerate(nodes):
        if node.op == "output":
            for out in node.all_input_nodes:
                k = key(out)
                if k in live:
                    carried[out.name] = (_key_name(k, phase), live[k])
            break
        alive_before = len(live)
        size = 0 if node in fused or node in born_early else _allocates(node, count_cpu)
        if size:
            live[node] = size
        transient = workspace_bytes(node, count_cpu) + _multi_output(node, fused, live, born_early, count_cpu)
        for k in itertools.islice(reversed(live), len(live) - alive_before):  # born at this node
            dies_at[max(last_use.get(k, -1), i)].append(k)
            alive_bytes += live[k]
        dying = dies_at.pop(i, [])
        at_node = alive_bytes + transient
        if size and not is_extern(node) and any(live[k] == size for k in dying if k is not node):
            # Inductor writes a kernel's output over an input of the same
            # size that dies in that kernel (inplace_buffers).
            at_node -= size
        if timeline.alive is not None:
            timeline.alive.append({_key_name(k, phase): b for k, b in live.items()})
        for k in dying:
            alive_bytes -= live.pop(k)
        for op_name, event in _EVENT_OPS.items():
            if node.target is getattr(torch.ops.offload_pass, op_name).default:
                timeline.events.append((len(timeline.nodes), event, node.args[0].name))
        timeline.phases.append(phase)
        timeline.nodes.append(node.name)
        timeline.live_bytes.append(at_node)
    return carried


def _key_name(key: object, phase: str) -> str:
    return key if isinstance(key, str) else f"{phase}:{key.name}"  # type: ignore[attr-defined]


def simulate_step(
    fw_gm: fx.GraphModule, bw_gm: fx.GraphModule, count_cpu: bool = False, record_alive: bool = False
) -> Timeline:
    """Device bytes alive along forward then backward. ``count_cpu`` counts
    CPU tensors as device memory (CPU-only runs), the pass's host copies aside.
    ``record_alive`` also keeps what is alive at each point (``Timeline.alive``)."""
    timeline = Timeline([], [], [], [], [] if record_alive else None)
    # What the forward returns and backward receives under the same name
    # starts the backward alive; host copies were never counted.
    carried = _walk(fw_gm.graph, "forward", {}, timeline, count_cpu)
    _walk(bw_gm.graph, "backward", carried, timeline, count_cpu)
    return timeline

