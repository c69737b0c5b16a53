"""The exact min-cut gives PyTorch's partitioner networkx's cut, and the pipeline plans exactly as with networkx.

Facts able to fail: on random graphs (bounded and unbounded arcs, arcs
both ways, loops, zero capacities, capacities past 2**53) the flow's
value and both sides of the cut equal ``networkx.minimum_cut``'s; an
unbounded path is networkx's error; what is not the partitioner's kind
goes to networkx, also from another thread; the pipeline under the exact
cut keeps the same trials, entries and rewritten graphs as under networkx's,
and every partition's cut was solved exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import random
import re
import threading

import networkx as nx
import pytest

from offload_pass import OffloadConfig
from offload_pass.examples.models import llama_shape
from offload_pass.offline import plan_offline
from offload_pass.pipeline import min_cuts, search
from offload_pass.planning.max_flow import FlowGraph, min_cut

pytestmark = pytest.mark.xdist_group("deep_budgets")


def _random_graph(seed: int) -> nx.DiGraph:
    rng = random.Random(seed)
    size = rng.randint(2, 40)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(size))
    huge = rng.random() < 0.3
    for _ in range(rng.randint(0, size * 3)):
        tail, head = rng.randrange(size), rng.randrange(size)
        kind = rng.random()
        if kind < 0.15:
            graph.add_edge(tail, head)  # no capacity: unbounded
        elif kind < 0.25:
            graph.add_edge(tail, head, capacity=math.inf)
        elif kind < 0.3:
            graph.add_edge(tail, head, capacity=0)
        else:
            graph.add_edge(tail, head, capacity=rng.randint(1, 2**60 if huge else 20))
    return graph


def _networkx_cut(graph, source, sink):
    try:
        value, (reach, non_reach) = nx.minimum_cut(graph, source, sink)
    except nx.NetworkXUnbounded:
        return "unbounded"
    return value, reach, non_reach


@pytest.mark.parametrize("seed", range(300))
def test_the_cut_is_networkx_cut(seed):
    graph = _random_graph(seed)
    source, sink = 0, len(graph) - 1
    expected = _networkx_cut(graph, source, sink)
    with min_cuts.exact_min_cuts() as counts:
        got = _networkx_cut(graph, source, sink)
    assert got == expected
    assert counts == ({"exact": 0, "networkx": 1} if expected == "unbounded" else {"exact": 1, "networkx": 0})


def test_min_cut_on_arrays():
    # 0 -> 1 -> 3 and 0 -> 2 -> 3, 1 -> 2 unbounded: 0->1 (3) and 0->2 (5)
    # leave the source (8), 1->3 (2) and 2->3 (4) enter the sink (6): flow 6, sink side {3} only.
    graph = FlowGraph(4, (0, 0, 1, 2, 1), (1, 2, 3, 3, 2), (3, 5, 2, 4, None))
    assert min_cut(graph, 0, 3) == (6, frozenset({3}))
    narrow = FlowGraph(3, (0, 1), (1, 2), (7, None))
    assert min_cut(narrow, 0, 2) == (7, frozenset({1, 2}))
    assert min_cut(FlowGraph(2, (0,), (1,), (None,)), 0, 1) is None
    with pytest.raises(ValueError, match="non-negative int"):
        min_cut(FlowGraph(2, (0,), (1,), (1.5,)), 0, 1)
    with pytest.raises(ValueError, match="same vertex"):
        min_cut(FlowGraph(2, (0,), (1,), (1,)), 1, 1)


def test_other_kinds_of_call_go_to_networkx():
    graph = nx.DiGraph()
    graph.add_edge("s", "a", capacity=2.5)
    graph.add_edge("a", "t", capacity=1)
    with min_cuts.exact_min_cuts() as counts:
        assert nx.minimum_cut(graph, "s", "t")[0] == 1  # a float capacity
        with pytest.raises(nx.NetworkXError):
            nx.minimum_cut(graph, "s", "missing")
        multi = nx.MultiDiGraph([("s", "t")])
        with pytest.raises(nx.NetworkXError):
            nx.minimum_cut(multi, "s", "t")
    assert counts == {"exact": 0, "networkx": 3}


def test_another_thread_and_the_exit_get_networkx_back():
    original = nx.minimum_cut
    graph = nx.DiGraph([("s", "t", {"capacity": 1})])
    with pytest.raises(RuntimeError, match="inside"):
        with min_cuts.exact_min_cuts() as counts:
            other = threading.Thread(target=lambda: nx.minimum_cut(graph, "s", "t"))
            other.start()
            other.join()
            raise RuntimeError("inside")
    assert counts == {"exact": 0, "networkx": 1}
    assert nx.minimum_cut is original


@contextlib.contextmanager
def _networkx_only():
    yield {"exact": 0, "networkx": 0}


def _plan(caplog):
    model, inputs = llama_shape(512, 3, 128, 4, 2, 384, 512, 1)
    with caplog.at_level(logging.DEBUG, logger="offload_pass"):
        made = plan_offline(model, kwargs=inputs, config=OffloadConfig(mode="budget", memory_budget=0.3), keep_graphs=True)
    lines = [r.getMessage() for r in caplog.records if "exact min-cuts" in r.getMessage()]
    caplog.clear()
    (graph,) = made.graphs
    plan = graph.plan
    facts = (
        [(str(t.level), t.step_ms, t.peak, t.copied_bytes) for t in plan.recompute_trials],
        str(plan.recompute_level), plan.prediction.peak, plan.prediction.step_ms,
        [(e.name, str(e.decision), e.reason) for e in plan.entries],
        # Symbol names (the RNG state's size) count on across compiles in a process.
        [re.sub(r"\bs\d+\b", "s", text) for text in dataclasses.astuple(graph.graph_texts)],
    )
    return facts, lines


def test_the_pipeline_plans_what_networkx_cuts_plan(caplog, monkeypatch):
    exact, lines = _plan(caplog)
    (line,) = lines
    solved, by_networkx = (int(v) for v in re.search(r"exact min-cuts (\d+), networkx min-cuts (\d+)", line).groups())
    assert solved >= 4 and by_networkx == 0, line
    assert any("blocks recomputed" in level for level, *_ in exact[0])
    monkeypatch.setattr(search, "exact_min_cuts", _networkx_only)
    assert exact == _plan(caplog)[0]
