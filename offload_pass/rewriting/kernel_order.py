"""Stage 4, rewriting, its last step: the rewritten order holds in Inductor's kernels.

Takes: Inductor's scheduler nodes after fusion (its ``_post_fusion_custom_pass``
hook). Gives: the same nodes in the graph's order wherever the dependencies
allow, when the graph holds this package's runtime ops; any other graph's
nodes unchanged.

Why: after fusing, Inductor sorts fused kernels by their earliest member and
then places each kernel's inputs ahead of it, depth first, in the order of
their buffer names. A kernel that fuses a node before a reload with one far
after it (two RMSNorm weight-gradient sums that read the same input, about 50
nodes apart) then pulls everything the late member needs (matmuls, the
attention backward, the wait) ahead of the compute the rewrite put between
the reload and its wait: on an H200 the decoder's first layer waited 0.6 ms
per step for a copy the plan gave four matmuls of lead, and
``benchmarks/reload_lead.py`` shows it on the CPU (layer 0 of a 3-layer
decoder, all three reloads). A stable order instead places each kernel
once all its inputs are done, ties broken by the graph's order: a spanning
kernel waits for its late member, and everything else stays where the
rewrite (and the step simulator that chose it) put it.
"""

from __future__ import annotations

import heapq
import logging
from typing import Any, Callable, Optional, Sequence

import torch
from torch._inductor import custom_graph_pass
from torch._inductor.custom_graph_pass import get_hash_for_files

__all__ = ["GraphOrder", "graph_order", "holds_runtime_ops"]

log = logging.getLogger(__name__)

# The ops whose place the rewrite chose (the example GroupedMLP's ops in the
# same namespace are compute and leave a graph to Inductor's order).
_RUNTIME_OP_NAMES = frozenset({"offload", "release", "reload", "wait_reload"})

# torch 2.13 keys the FX graph cache on a scheduler pass's uuid when it is a
# ``CustomSchedulerPass``; a torch without the class bypasses the cache for a
# plain callable, which is correct, only slower to compile again.
_Base: Any = getattr(custom_graph_pass, "CustomSchedulerPass", object)


def _runtime_op_name(snode: Any) -> Optional[str]:
    """The runtime op a scheduler node runs, or None."""
    kernel = getattr(snode, "node", None)
    op = getattr(kernel, "op_overload", None)
    schema = getattr(op, "_schema", None)
    if schema is None:
        return None
    namespace, _, name = schema.name.partition("::")
    return name if namespace == "offload_pass" and name in _RUNTIME_OP_NAMES else None


def holds_runtime_ops(nodes: Sequence[Any]) -> bool:
    """Whether any scheduler node (a fused one's members included) runs a runtime op."""
    return any(_runtime_op_name(member) for snode in nodes for member in snode.get_nodes())


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
        return (getattr(nodes[index], "min_order", index), index)

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


class GraphOrder(_Base):
    """Inductor's ``_post_fusion_custom_pass``: ``graph_order`` for graphs
    that hold runtime ops, after ``inner`` (a pass the user had set, kept
    and run first). ``moved`` counts, per call, the nodes placed elsewhere
    than Inductor placed them (debug logs say so per graph)."""

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
        log.debug("offload_pass: graph order: %d of %d scheduler nodes placed differently from Inductor", moved, len(nodes))
        return ordered

    def uuid(self) -> object:
        inner = None
        if self.inner is not None:
            inner_uuid = getattr(self.inner, "uuid", None)
            inner = inner_uuid() if callable(inner_uuid) else repr(self.inner)
        return (get_hash_for_files((__file__,)), torch.__version__, inner)

    def __reduce__(self):
        # The FX graph cache pickles the config into its key: the uuid says
        # everything this pass's output depends on (``moved`` does not).
        return (_graph_order_uuid, (self.uuid(),))


def _graph_order_uuid(uuid: object) -> object:
    return uuid
