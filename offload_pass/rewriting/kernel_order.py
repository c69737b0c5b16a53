"""Rewriting, its last step: the rewritten order holds in Inductor's kernels.

Takes: Inductor's scheduler nodes after fusion (its ``_post_fusion_custom_pass``
hook). Gives: the same nodes in the graph's order wherever the dependencies
allow, when the graph holds this package's runtime ops; any other graph's
nodes unchanged.

Why: after fusing, Inductor places each kernel's inputs ahead of it, depth
first. A kernel that fuses a node before a reload with one far after it then
pulls everything its late member needs ahead of the compute the rewrite put
between the reload and its wait, and the wait stalls on a copy the plan gave
ample lead (``benchmarks/reload_lead.py`` shows it on the CPU). A stable
order places each kernel once all its inputs are done, ties broken by the
graph's order, so everything stays where the rewrite and the step simulator
put it.
"""

from __future__ import annotations

import heapq
import logging
from typing import Any, Callable, Optional, Sequence

import torch
from torch._inductor import custom_graph_pass
from torch._inductor.custom_graph_pass import get_hash_for_files

from offload_pass.runtime import OPS

__all__ = ["GraphOrder", "graph_order", "graph_order_pass", "holds_runtime_ops"]

log = logging.getLogger(__name__)

# The ops whose place the rewrite chose (the example GroupedMLP's ops in the
# same namespace are compute and leave a graph to Inductor's order).
_RUNTIME_OPS = frozenset(OPS.values())

# torch 2.13 keys the FX graph cache on a scheduler pass's uuid when the
# pass is a ``CustomSchedulerPass`` and bypasses the cache for any other
# callable. torch 2.11 has no such class: there the pass is a plain callable.
_SchedulerPass: Any = getattr(custom_graph_pass, "CustomSchedulerPass", None)


def _runs_runtime_op(snode: Any) -> bool:
    """Whether a (non-fused) scheduler node runs one of the runtime ops."""
    return getattr(getattr(snode, "node", None), "op_overload", None) in _RUNTIME_OPS


def holds_runtime_ops(nodes: Sequence[Any]) -> bool:
    """Whether any scheduler node (a fused one's members included) runs a runtime op."""
    return any(_runs_runtime_op(member) for snode in nodes for member in snode.get_nodes())


def graph_order(nodes: Sequence[Any]) -> list[Any]:
    """``nodes`` in a topological order that takes, among the nodes whose
    inputs are all done, the one earliest in the graph (``min_order``, the
    earliest member of a fused node; then the given position). Dependencies
    are Inductor's own: a node's unmet dependencies on buffers that nodes of
    the list write, as in ``Scheduler.topological_sort_schedule``. Returns
    ``nodes`` unchanged (and logs why) if they do not form a DAG."""
    writer: dict[str, int] = {}
    for index, snode in enumerate(nodes):
        for name in snode.get_buffer_names():
            writer[name] = index
    users: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for index, snode in enumerate(nodes):
        inputs = {writer[dep.name] for dep in snode.unmet_dependencies if dep.name in writer} - {index}
        waiting[index] = len(inputs)
        for producer in inputs:
            users[producer].append(index)

    def key(index: int) -> tuple[int, int]:
        # Set on every scheduler node by then (compute_ancestors, or the
        # group's constructor from its members).
        return (nodes[index].min_order, index)

    ready = [key(i) for i in range(len(nodes)) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, key(user))
    if len(order) != len(nodes):
        log.warning(
            "offload_pass: %d of %d scheduler nodes are in a dependency cycle; Inductor's order kept",
            len(nodes) - len(order), len(nodes),
        )
        return list(nodes)
    return [nodes[i] for i in order]


class GraphOrder:
    """Inductor's ``_post_fusion_custom_pass``: ``graph_order`` for graphs
    that hold runtime ops, after ``inner`` (a scheduler pass the user had
    set: it runs first, its fusions stay, and in a graph that holds runtime
    ops its order is replaced by the graph's). ``moved`` records, per graph
    reordered, how many positions hold another node than Inductor put there
    (debug logs say so)."""

    def __init__(self, inner: Optional[Callable[[list[Any]], list[Any]]] = None) -> None:
        self.inner = inner
        self.moved: list[int] = []

    def __call__(self, nodes: list[Any]) -> list[Any]:
        if self.inner is not None:
            nodes = self.inner(nodes)
        if not holds_runtime_ops(nodes):
            return nodes
        ordered = graph_order(nodes)
        moved = sum(1 for a, b in zip(nodes, ordered) if a is not b)
        self.moved.append(moved)
        log.debug("offload_pass: graph order: %d of %d positions hold another scheduler node than Inductor's order", moved, len(nodes))
        return ordered

    def __reduce__(self):
        # Inductor deep-copies and pickles its config (config copies, the
        # cache key): a copy is the same pass (``moved`` starts afresh). An
        # ``inner`` that cannot be pickled makes Inductor bypass its cache.
        return (type(self), (self.inner,))


if _SchedulerPass is not None:

    class _KeyedGraphOrder(GraphOrder, _SchedulerPass):
        """``GraphOrder`` that the FX graph cache keys on: this file's hash
        and the uuid of the user's pass it runs first."""

        def uuid(self) -> object:
            inner = None if self.inner is None else self.inner.uuid()
            return (get_hash_for_files((__file__,)), torch.__version__, inner)


def graph_order_pass(inner: Optional[Callable[[list[Any]], list[Any]]] = None) -> GraphOrder:
    """The pass to hand Inductor, around the user's ``inner`` (None: none
    set). Keyed by the FX graph cache where torch can key scheduler passes
    and ``inner`` says what it does (a ``CustomSchedulerPass`` with a uuid);
    otherwise a plain callable, for which Inductor bypasses the cache as it
    did for the user's pass alone (a repr is no key: a function's holds its
    address, another's may stay the same while its code changes)."""
    if _SchedulerPass is not None and (inner is None or (isinstance(inner, _SchedulerPass) and inner.uuid())):
        return _KeyedGraphOrder(inner)
    return GraphOrder(inner)
