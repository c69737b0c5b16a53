"""The min-cuts a recompute search shares: each solved once per joint graph.

Takes: nothing but the scope of one search over partitions of one joint
graph. Gives ``shared_min_cuts()``, a context manager under which PyTorch's
partitioner solves each distinct min-cut once and answers it again from
memory for the partitions after.

Why: under ``activation_memory_budget`` below 1, PyTorch's partitioner
solves up to three min-cuts that do not depend on the budget (the default
bans, then two more aggressive option sets) before the knapsack's own one;
mode="budget"'s search partitions the same joint at up to ten levels, so
most of its min-cut time (a third of a partition on an 8B-sized graph) is
spent solving the same cuts again.

What a cut is keyed on: the graph's nodes (names, ops, targets, inputs,
argument values, users in order, tensor sizes and dtypes, checkpointing
tags: a block cut's tags make another key), the node distances and sets
the partitioner computes before it (``node_info``), the partitioner's
config less the budget, and the cut's options and unbanned nodes. Within
one search every partition is of the same joint under the same arguments,
so all of that is fixed but the tags and the budget; the key guards the
rest all the same. The answer is handed back as the nodes of the graph
being partitioned, matched by name (each partition works on its own copy
of the joint). The memory is the calling thread's: a partition on another
thread while a search runs solves its own cuts. Where PyTorch's
``solve_min_cut`` does not have the signature this reads, nothing is
shared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import threading
from typing import Iterator

import torch
import torch.fx as fx
from torch._functorch import partitioners

__all__ = ["shared_min_cuts"]

log = logging.getLogger("offload_pass")

_PARAMETERS = ("joint_graph", "node_info", "min_cut_options", "dont_ban")


def _shareable() -> bool:
    solve = getattr(partitioners, "solve_min_cut", None)
    return solve is not None and tuple(inspect.signature(solve).parameters) == _PARAMETERS


def _value_key(node: fx.Node) -> tuple:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return (str(val.dtype), tuple(str(s) for s in val.shape))
    return (type(val).__name__,)


def _graph_key(graph: fx.Graph) -> tuple:
    """What of the graph a min-cut reads, by node name."""
    return tuple(
        (n.name, n.op, str(n.target), repr(n.args), repr(n.kwargs), tuple(u.name for u in n.users), _value_key(n),
         str(n.meta.get("recompute")), n.meta.get("ac_graph_id"), getattr(n, "dist_from_bw", None))
        for n in graph.nodes
    )


def _node_info_key(node_info) -> tuple:
    """The partitioner's node lists and sets (in their order) and forward order, by name."""
    parts = []
    for field in (
        "inputs", "_required_fw_nodes", "required_bw_nodes", "tangents_closure", "unclaimed_nodes",
        "static_lifetime_input_nodes",
    ):
        nodes = getattr(node_info, field, None)
        parts.append(None if nodes is None else tuple(n.name for n in nodes))
    order = getattr(node_info, "fw_order", None)
    parts.append(None if order is None else tuple((n.name, i) for n, i in order.items()))
    return tuple(parts)


def _config_key() -> tuple:
    config = torch._functorch.config.get_config_copy()
    # The budget picks among the cuts; no cut reads it.
    return tuple(sorted((k, repr(v)) for k, v in config.items() if k != "activation_memory_budget"))


@contextlib.contextmanager
def shared_min_cuts() -> Iterator[dict]:
    """Within the block, PyTorch's partitioner solves each distinct min-cut
    once on this thread. Yields the counts (``solved``, ``shared``)."""
    counts = {"solved": 0, "shared": 0}
    if not _shareable():
        log.debug("offload_pass: solve_min_cut has another signature here: min-cuts are not shared")
        yield counts
        return
    original = partitioners.solve_min_cut
    owner = threading.get_ident()
    memory: dict[tuple, tuple[list[str], list[str]]] = {}

    def solve(joint_graph, node_info, min_cut_options, dont_ban=None):
        if threading.get_ident() != owner:
            return original(joint_graph, node_info, min_cut_options, dont_ban)
        key = (
            _graph_key(joint_graph), _node_info_key(node_info), _config_key(),
            repr(dataclasses.astuple(min_cut_options)), frozenset(n.name for n in dont_ban or ()),
        )
        if key in memory:
            counts["shared"] += 1
            by_name = {n.name: n for n in joint_graph.nodes}
            saved, banned = memory[key]
            return [by_name[name] for name in saved], partitioners.OrderedSet(by_name[name] for name in banned)
        counts["solved"] += 1
        saved, banned = original(joint_graph, node_info, min_cut_options, dont_ban)
        memory[key] = ([n.name for n in saved], [n.name for n in banned])
        return saved, banned

    partitioners.solve_min_cut = solve
    try:
        yield counts
    finally:
        # Put back what was there, unless another search replaced it since (its exit puts back ours).
        if partitioners.solve_min_cut is solve:
            partitioners.solve_min_cut = original
