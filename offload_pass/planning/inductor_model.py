"""A model of how Inductor fuses and emits kernels, as far as placing
copies and estimating memory need it.

Takes: FX nodes of a forward or backward graph. Gives: which pointwise
results are never written to memory (``fused_away``), which nodes run as
their own kernel (``is_extern``), where an op may go without splitting a
fused kernel (``safe_slots``) and where an op placed in the graph runs in
the generated code (``in_place_slots``). Each rule was checked against
Inductor's output code on torch 2.11 / 2.13; the comments say which
measurement it came from.
"""

from __future__ import annotations

import operator
from typing import Callable, Sequence

import torch
import torch.fx as fx

from offload_pass.views import is_view_node

__all__ = ["fused_away", "in_place_slots", "is_extern", "safe_slots", "written_whatever_partition"]


# Gathers that Inductor lowers to pointwise loads with computed indices: they
# fuse like pointwise ops, so what they read may never be written to memory
# (Inductor recomputes it in every gather's kernel and keeps its inputs alive).
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


def _read_in_memory(node: fx.Node, among: Callable[[fx.Node], bool] = lambda user: True) -> bool:
    """Does some consumer (of those ``among`` admits) need ``node``'s value
    written to memory: the graph output, an op Inductor does not fuse
    (matmuls, attention, custom ops), or a view through which one of those
    reads it."""
    for user in node.users:
        if not among(user):
            continue
        if user.op != "call_function":
            return True
        if is_view_node(user):
            if _read_in_memory(user, among):
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


def written_whatever_partition(node: fx.Node, among: Callable[[fx.Node], bool]) -> bool:
    """Does ``node`` cost a kernel and its write in every graph that holds
    it with the consumers ``among`` admits (a partition's graph holds a node
    with those of its joint-graph consumers that run in the same graph, and
    perhaps more): anything Inductor does not fuse, or a pointwise result
    one of those consumers reads in memory. Views: never."""
    if node.op != "call_function" or is_view_node(node):
        return False
    return not _fusable(node) or _read_in_memory(node, among)


def is_extern(node: fx.Node) -> bool:
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
        is_extern(node) or (i + 1 < len(nodes) and is_extern(nodes[i + 1])) or i + 1 == len(nodes)
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
    result is first needed (a reload placed after a ``cat`` runs before the
    cat's kernel, with the cat's inputs and output alive). Views and
    getitems emit no kernel: after them, as after the last node before
    them."""
    slots, pending = [], False
    for node in nodes:
        if _emitted_in_place(node):
            pending = False
        elif not (is_view_node(node) or (node.op == "call_function" and node.target is operator.getitem)):
            pending = True
        slots.append(not pending)
    return slots
