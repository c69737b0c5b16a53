"""Simulated device-memory timeline of one training step.

Takes: a forward and a backward graph module (before or after the rewrite).
Gives: the bytes of device tensors alive at each node of the forward, then
of the backward, from the fake tensors' sizes and the graphs' last uses (views
share their base's storage; host tensors do not count; parameters and graph
inputs are outside the step and do not count either; a pointwise result whose
users all fuse it, as Inductor does, is never in memory and keeps its inputs
alive until those users run). Each point is the most a node holds at
once: its outputs (all of a multi-output op's at the op) and scratch
memory (``register_workspace``) on top of everything alive before it,
its inputs included; what dies there is freed after it. The plan uses the
difference of two such peaks as the reduction it expects, the measured one is
compared against (R), and the memory-timeline notebook draws it where there
is no GPU.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import weakref
from typing import Callable, Optional, Sequence

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from offload_pass.views import is_view_node, storage_root

__all__ = ["Timeline", "in_place_slots", "python_op_workspace", "register_workspace", "safe_slots", "simulate_step"]

log = logging.getLogger(__name__)


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
    return size_hint(nbytes) or 0


def size_hint(size: object) -> Optional[int]:
    """A size as an int, a symbolic one by its hint: reading it never adds a
    guard, so a dynamic graph is not specialized by being estimated."""
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else None


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
    return _storage_bytes(val)


# Scratch memory an op allocates and frees inside itself, by op: a function
# of the node giving bytes. The simulation cannot see inside an op, and on an
# H100 such scratch made the step's peak (cuDNN attention backward: 64.5 MiB;
# the grouped MLP backward's fp32 activation gradient: 144 MiB per layer at
# hidden 2048).
_WORKSPACE: dict[object, Callable[[fx.Node], int]] = {}


def register_workspace(op: object, bytes_of: Callable[[fx.Node], int]) -> None:
    """Tell the simulation how much scratch memory ``op`` (an OpOverload or
    its packet) holds while it runs: ``bytes_of(node)`` from the node's
    arguments' fake tensors. Outputs are counted already; only the memory
    the op frees before returning belongs here."""
    _WORKSPACE[op] = bytes_of


def _workspace(node: fx.Node, count_cpu: bool) -> int:
    if node.op != "call_function":
        return 0
    fn = _WORKSPACE.get(node.target) or _WORKSPACE.get(getattr(node.target, "overloadpacket", None))
    if fn is None:
        return 0
    devices = {t.device.type for t in tree_leaves(node.meta.get("val")) if isinstance(t, torch.Tensor)}
    if devices and devices <= {"cpu"} and not count_cpu:
        return 0
    try:
        return int(fn(node))
    except Exception as error:  # an estimate must never stop a compile
        log.debug("offload_pass: no workspace estimate for %s: %s", node.name, error)
        return 0


def _attention_backward_workspace(node: fx.Node) -> int:
    # Flash-style backward kernels (cuDNN, FlashAttention-2) accumulate dq in
    # fp32 and keep one fp32 row statistic per query: measured 64.5 MiB for
    # q = 2x16x4096x128 (cuDNN, H100).
    q = node.args[1].meta.get("val") if isinstance(node.args[1], fx.Node) else None
    if not isinstance(q, torch.Tensor) or q.device.type != "cuda":
        return 0
    numel = _hint(q.numel())
    return 4 * numel + 4 * (numel // max(_hint(q.shape[-1]), 1))


for _name in (
    "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_flash_attention_backward",
    "_efficient_attention_backward",
):
    if hasattr(torch.ops.aten, _name):
        register_workspace(getattr(torch.ops.aten, _name), _attention_backward_workspace)


def _hint(value: object) -> int:
    hint = size_hint(value)
    if hint is None:
        raise ValueError(f"symbolic size {value} without a hint")
    return hint


class _StoragePeak(TorchDispatchMode):
    """Bytes of the storages that ops create while the mode is on, alive at
    once at most (Python drops a tensor when its last reference goes, as it
    does on the GPU)."""

    def __init__(self, existing: set[int]) -> None:
        super().__init__()
        self.existing = existing
        self.live: dict[int, list[int]] = {}
        self.total = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.existing:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [storage.nbytes(), 0]
            self.total += entry[0]
            self.peak = max(self.peak, self.total)
        entry[1] += 1
        weakref.finalize(t, self._drop, key)

    def _drop(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[key]
            self.total -= entry[0]


def python_op_workspace(impl: Callable[..., object]) -> Callable[[fx.Node], int]:
    """A ``register_workspace`` function for an op implemented in Python by
    ``impl`` (same arguments as the op): runs ``impl`` on meta tensors of the
    node's shapes and returns the most memory it held beyond its outputs."""

    def bytes_of(node: fx.Node) -> int:
        def meta(a: object) -> object:
            if isinstance(a, fx.Node):
                val = a.meta.get("val")
                if isinstance(val, torch.Tensor):
                    return torch.empty_strided(
                        [_hint(d) for d in val.shape], [_hint(d) for d in val.stride()],
                        dtype=val.dtype, device="meta",
                    )
                return _hint(val)
            if isinstance(a, (list, tuple)):
                return type(a)(meta(x) for x in a)
            return a

        args = [meta(a) for a in node.args]
        kwargs = {k: meta(v) for k, v in node.kwargs.items()}
        existing = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        mode = _StoragePeak(existing)
        with mode:
            out = impl(*args, **kwargs)
        outputs = sum(t.untyped_storage().nbytes() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return max(mode.peak - outputs, 0)

    return bytes_of


# Gathers that Inductor lowers to pointwise loads with computed indices: they
# fuse like pointwise ops. On an H100 MoE stack, the residual gradient sum
# read by each layer's token gather was never written to memory; Inductor
# recomputed it in every gather's kernel and kept the summands alive.
_INDIRECT_POINTWISE = {
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_select.default,
    torch.ops.aten.gather.default,
    torch.ops.aten.embedding.default,
}


def _fusable(node: fx.Node) -> bool:
    """Pointwise ops, gathers and views: Inductor fuses them into their consumers."""
    if node.op != "call_function":
        return False
    if is_view_node(node) or node.target in _INDIRECT_POINTWISE:
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


# Extern kernels that Inductor lowers without a fallback; with the fallbacks
# and the ops whose inputs it must realize, they run where the graph has them.
_EXTERN_LOWERED = {torch.ops.aten.addmm, torch.ops.aten.baddbmm, torch.ops.aten._scaled_mm}


def _emitted_in_place(node: fx.Node) -> bool:
    """Does Inductor's generated code run ``node`` where the graph has it?
    Graph inputs, custom ops and extern kernels (matmuls, attention and
    the other fallbacks) yes. Everything it lowers itself (pointwise ops,
    cat, reductions) it emits lazily, where the result is first needed."""
    if node.op == "placeholder":
        return True
    if node.op != "call_function" or node.target.__module__ == "_operator":
        return False
    namespace = getattr(node.target, "namespace", None)
    if namespace not in ("aten", "prims"):
        return namespace is not None
    # Inductor internals, present on torch 2.11 and 2.13. An aten op without
    # a lowering becomes a fallback when Inductor meets it. Without them only
    # _EXTERN_LOWERED counts: reloads are then counted from earlier points,
    # more memory, never less.
    from torch._inductor import lowering

    packet = getattr(node.target, "overloadpacket", None)
    lowered = getattr(lowering, "lowerings", None)
    if lowered is not None and node.target not in lowered and packet not in lowered:
        return True
    return packet in _EXTERN_LOWERED or any(
        node.target in ops or packet in ops
        for ops in (getattr(lowering, "fallbacks", ()), getattr(lowering, "needs_realized_inputs", ()))
    )


def in_place_slots(nodes: Sequence[fx.Node]) -> list[bool]:
    """``slots[i]``: does an op placed right after ``nodes[i]`` run right
    after it in the code Inductor generates? Only after a node that Inductor
    emits where it stands (``_emitted_in_place``): an op placed after a
    pointwise node runs before that node's kernel, which is emitted where its
    result is first needed. On an H100 a reload placed after a ``cat`` ran
    before the cat's kernel, with the cat's inputs and output alive. Views
    and getitems emit no kernel: after them, as after the last node before
    them."""
    slots, pending = [], False
    for node in nodes:
        if _emitted_in_place(node):
            pending = False
        elif not (is_view_node(node) or (node.op == "call_function" and node.target is operator.getitem)):
            pending = True
        slots.append(not pending)
    return slots


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
    born_early: set[fx.Node] = set()
    for i, node in enumerate(nodes):
        if node.op == "output":
            for out in node.all_input_nodes:
                k = key(out)
                if k in live:
                    carried[out.name] = (_key_name(k, phase), live[k])
            break
        size = 0 if node in fused or node in born_early else _allocates(node, count_cpu)
        if size:
            live[node] = size
        # A multi-output op writes all its outputs at once: their getitems
        # own them from here; an output nobody reads lives only inside it.
        transient = _workspace(node, count_cpu)
        outputs = node.meta.get("val")
        if node.op == "call_function" and isinstance(outputs, (tuple, list)) and not _returns_views(node):
            taken = set()
            for user in node.users:
                if user.target is operator.getitem and not is_view_node(user):
                    taken.add(user.args[1])
                    nbytes = 0 if user in fused else _allocates(user, count_cpu)
                    if nbytes:
                        live[user] = nbytes
                        born_early.add(user)
            transient += sum(
                _tensor_bytes(v, count_cpu) for j, v in enumerate(outputs) if j not in taken
            )
        dying = [k for k in live if last_use.get(k, -1) <= i]
        at_node = sum(live.values()) + transient
        if size and not _extern(node) and any(live[k] == size for k in dying if k is not node):
            # Inductor writes a kernel's output over an input of the same
            # size that dies in that kernel (inplace_buffers).
            at_node -= size
        if timeline.alive is not None:
            timeline.alive.append({_key_name(k, phase): b for k, b in live.items()})
        for k in dying:
            del live[k]
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
