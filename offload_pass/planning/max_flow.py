"""An exact minimum s-t cut over integer capacities: the cut PyTorch's partitioner asks networkx for.

Takes: a directed graph as plain arrays (``FlowGraph``: arcs' tails, heads
and capacities, ``None`` for an unbounded arc) and two vertices. Gives
``min_cut``: the flow's value and the sink side, every vertex that can
still reach the sink in the residual graph of a maximum flow; ``None``
where an unbounded path joins the two (the caller reports it).

Why the same cut as networkx: with exact (integer) arithmetic the set of
vertices that reach the sink in the residual graph is the same for every
maximum flow (it is the minimum cut whose sink side is smallest), and that
set is what ``networkx.minimum_cut`` returns as its second part. So any
maximum-flow algorithm gives PyTorch's partitioner the saved set it would
get from networkx's preflow-push; this one (Dinic's, on flat lists) takes
milliseconds where that takes a second on an 8B-sized joint graph.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import Optional

__all__ = ["FlowGraph", "min_cut"]


@dataclasses.dataclass(frozen=True)
class FlowGraph:
    """``size`` vertices (0..size-1) and arcs ``tails[i] -> heads[i]`` of
    capacity ``capacities[i]`` (a non-negative int; None: unbounded)."""

    size: int
    tails: tuple[int, ...]
    heads: tuple[int, ...]
    capacities: tuple[Optional[int], ...]


def _unbounded_path(graph: FlowGraph, source: int, sink: int) -> bool:
    """Whether the sink is reachable from the source over unbounded arcs alone."""
    out: list[list[int]] = [[] for _ in range(graph.size)]
    for tail, head, cap in zip(graph.tails, graph.heads, graph.capacities):
        if cap is None:
            out[tail].append(head)
    seen, todo = {source}, [source]
    while todo:
        for head in out[todo.pop()]:
            if head == sink:
                return True
            if head not in seen:
                seen.add(head)
                todo.append(head)
    return False


def _residual(graph: FlowGraph) -> tuple[list[list[int]], list[int], list[int]]:
    """Arc 2i is arc i, arc 2i+1 its reverse (capacity 0); an unbounded arc
    gets more than every bounded arc together, which no bounded flow fills."""
    unbounded = sum(c for c in graph.capacities if c is not None) + 1
    adjacent: list[list[int]] = [[] for _ in range(graph.size)]
    heads: list[int] = []
    caps: list[int] = []
    for tail, head, cap in zip(graph.tails, graph.heads, graph.capacities):
        if tail == head:
            cap = 0  # a loop carries no flow between two sides
        adjacent[tail].append(len(heads))
        heads.append(head)
        caps.append(unbounded if cap is None else cap)
        adjacent[head].append(len(heads))
        heads.append(tail)
        caps.append(0)
    return adjacent, heads, caps


def _levels(adjacent: list[list[int]], heads: list[int], caps: list[int], source: int) -> list[int]:
    """Breadth-first distance from the source over arcs with capacity left (-1: unreached)."""
    level = [-1] * len(adjacent)
    level[source] = 0
    todo = deque([source])
    while todo:
        tail = todo.popleft()
        for arc in adjacent[tail]:
            head = heads[arc]
            if caps[arc] > 0 and level[head] < 0:
                level[head] = level[tail] + 1
                todo.append(head)
    return level


def _blocking_flow(
    adjacent: list[list[int]], heads: list[int], caps: list[int], level: list[int], source: int, sink: int
) -> int:
    """Dinic's phase: augment along shortest paths (``level``) until none is left; the flow added."""
    at = [0] * len(adjacent)  # each vertex's next arc to try
    path: list[int] = []
    total, vertex = 0, source
    while True:
        if vertex == sink:
            pushed = min(caps[arc] for arc in path)
            total += pushed
            cut = -1
            for i, arc in enumerate(path):
                caps[arc] -= pushed
                caps[arc ^ 1] += pushed
                if cut < 0 and caps[arc] == 0:
                    cut = i
            del path[cut:]  # back to the tail of the first arc filled
            vertex = heads[path[-1]] if path else source
            continue
        arcs = adjacent[vertex]
        i = at[vertex]
        while i < len(arcs):
            arc = arcs[i]
            if caps[arc] > 0 and level[heads[arc]] == level[vertex] + 1:
                break
            i += 1
        at[vertex] = i
        if i < len(arcs):
            path.append(arcs[i])
            vertex = heads[arcs[i]]
            continue
        level[vertex] = -1  # a dead end this phase
        if not path:
            return total
        vertex = heads[path.pop() ^ 1]
        at[vertex] += 1


def _reaching(adjacent: list[list[int]], heads: list[int], caps: list[int], sink: int) -> set[int]:
    """Every vertex with a path of arcs with capacity left to the sink."""
    reach = {sink}
    todo = [sink]
    while todo:
        head = todo.pop()
        for arc in adjacent[head]:
            tail = heads[arc]  # arc ^ 1 runs tail -> head
            if tail not in reach and caps[arc ^ 1] > 0:
                reach.add(tail)
                todo.append(tail)
    return reach


def min_cut(graph: FlowGraph, source: int, sink: int) -> Optional[tuple[int, frozenset[int]]]:
    """The maximum flow's value and the sink side of the minimum cut (see
    the module docstring); None where an unbounded path joins source and sink."""
    if source == sink:
        raise ValueError(f"min_cut: source and sink are the same vertex ({source})")
    if any(c is not None and (type(c) is not int or c < 0) for c in graph.capacities):
        raise ValueError("min_cut: every capacity must be a non-negative int or None (unbounded)")
    if _unbounded_path(graph, source, sink):
        return None
    adjacent, heads, caps = _residual(graph)
    value = 0
    while True:
        level = _levels(adjacent, heads, caps, source)
        if level[sink] < 0:
            return value, frozenset(_reaching(adjacent, heads, caps, sink))
        value += _blocking_flow(adjacent, heads, caps, level, source, sink)
