"""The min-cuts PyTorch's partitioner solves for the pipeline: exactly, fast, and once.

Takes: nothing but the scope of the pipeline's partitions. Gives two
context managers: ``exact_min_cuts()``, under which the partitioner's
``networkx.minimum_cut`` is answered by ``planning.max_flow`` (the same
cut: see there), and ``shared_min_cuts()``, under which it solves each
distinct min-cut once and answers it again from memory for the partitions
after.

Why exact_min_cuts: networkx's preflow-push takes about a second per cut
on an 8B-sized joint graph, most of a partition's time; the partitions
around it are then the same, only sooner. Where a call is not the
partitioner's kind (capacities other than ints, a multigraph, a source or
sink missing, an unbounded path), networkx answers it, so its errors are
the ones PyTorch reports.

Why shared_min_cuts: under ``activation_memory_budget`` below 1, PyTorch's partitioner
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
import math
import threading
from typing import Iterator, Optional

import networkx as nx
import torch
import torch.fx as fx
from torch._functorch import partitioners

from offload_pass.planning.max_flow import FlowGraph, min_cut

__all__ = ["exact_min_cuts", "shared_min_cuts"]

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


def _flow_graph(graph, source, sink) -> Optional[tuple[FlowGraph, list, int, int]]:
    """``graph`` (a networkx DiGraph, capacity attribute "capacity", absent
    or inf: unbounded) as a ``FlowGraph``, its vertices in index order and
    the source's and sink's indices; None where networkx should answer (see
    the module docstring)."""
    if type(graph) is not nx.DiGraph or source not in graph or sink not in graph or source == sink:
        return None
    vertices = list(graph)
    index = {v: i for i, v in enumerate(vertices)}
    tails, heads, capacities = [], [], []
    for tail, head, data in graph.edges(data=True):
        cap = data.get("capacity", math.inf)
        if cap == math.inf:
            cap = None
        elif type(cap) is not int or cap < 0:
            return None
        tails.append(index[tail])
        heads.append(index[head])
        capacities.append(cap)
    return FlowGraph(len(vertices), tuple(tails), tuple(heads), tuple(capacities)), vertices, index[source], index[sink]


@contextlib.contextmanager
def exact_min_cuts() -> Iterator[dict]:
    """Within the block, ``networkx.minimum_cut(graph, source, sink)`` on
    this thread is solved by ``planning.max_flow.min_cut`` where it can be
    (the module docstring). Yields the counts (``exact``, ``networkx``)."""
    counts = {"exact": 0, "networkx": 0}
    original = nx.minimum_cut
    owner = threading.get_ident()

    def minimum_cut(graph, source, sink, *args, **kwargs):
        made = None if args or kwargs or threading.get_ident() != owner else _flow_graph(graph, source, sink)
        solved = None if made is None else min_cut(made[0], made[2], made[3])
        if solved is None:
            counts["networkx"] += 1
            return original(graph, source, sink, *args, **kwargs)
        counts["exact"] += 1
        value, sink_side = solved
        vertices = made[1]
        non_reachable = {vertices[i] for i in sink_side}
        return value, (set(vertices) - non_reachable, non_reachable)

    nx.minimum_cut = minimum_cut
    try:
        yield counts
    finally:
        if nx.minimum_cut is minimum_cut:
            nx.minimum_cut = original
