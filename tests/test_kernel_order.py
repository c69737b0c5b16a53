"""The rewritten order holds in Inductor's generated code (``rewriting.kernel_order``)."""

from __future__ import annotations

import copy
import pickle
from dataclasses import dataclass, field

import pytest
import torch
from torch._inductor import custom_graph_pass
from torch._inductor.utils import run_and_get_code

import offload_pass
from kernel_lead import code_lead, graph_lead
from offload_pass.examples.models import make_decoder
from offload_pass.rewriting.kernel_order import GraphOrder, graph_order, graph_order_pass


@dataclass(frozen=True)
class _Dep:
    name: str


@dataclass(eq=False)
class _Node:
    """The part of an Inductor scheduler node ``graph_order`` reads."""

    name: str
    min_order: int
    reads: tuple[str, ...] = ()
    unmet_dependencies: set = field(default_factory=set)

    def __post_init__(self) -> None:
        self.unmet_dependencies = {_Dep(r) for r in self.reads}

    def get_buffer_names(self) -> set[str]:
        return {self.name}


def _names(nodes) -> list[str]:
    return [n.name for n in nodes]


def test_a_kernel_spanning_a_reload_waits_for_its_late_member():
    # Inductor's order after fusion (what ``topological_sort_schedule`` made
    # of the fused kernels sorted by their earliest member): the kernel
    # ``sums`` (min_order 3) fuses a sum before the wait with one that
    # needs the matmul after it, and pulled the wait and the matmul ahead
    # of the norm that the rewrite put between the reload and its wait.
    reload = _Node("reload", 2)
    wait = _Node("wait", 5, ("reload",))
    mm = _Node("mm", 6, ("wait",))
    sums = _Node("sums", 3, ("mm",))
    norm = _Node("norm", 4)
    inductor = [_Node("mm0", 1), reload, wait, mm, sums, norm]
    assert _names(graph_order(inductor)) == ["mm0", "reload", "norm", "wait", "mm", "sums"]


def test_graph_order_keeps_a_dependency_free_order_and_refuses_cycles():
    nodes = [_Node(f"n{i}", i) for i in range(5)]
    assert graph_order(list(reversed(nodes))) == nodes
    a, b = _Node("a", 0, ("b",)), _Node("b", 1, ("a",))
    assert graph_order([a, b]) == [a, b]


def _decoder_code():
    torch.manual_seed(0)
    model = make_decoder(3, 64, 4, dtype=torch.float32, device="cpu")
    offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, keep_graphs=True)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 32, 64)
    with torch._inductor.config.patch(force_disable_caches=True):
        _, codes = run_and_get_code(lambda: compiled(x).sum().backward())
    backward = [c for c in codes if "offload_pass.reload.default" in c][-1]
    return graph_lead(backend.records[-1].graphs.backward), code_lead(backward)


def test_every_reload_keeps_its_lead_in_the_generated_code():
    # Without the pass, layer 0's three reloads ran right before their waits
    # (a fused RMSNorm weight-gradient sum spanning the reload pulled the
    # attention backward ahead): the check below failed on all three.
    in_graph, in_code = _decoder_code()
    assert set(in_graph) == set(in_code)
    assert len(in_graph) == 16
    lost = sorted(name for name, (nodes, _heavy) in in_graph.items() if nodes and not in_code[name])
    assert lost == [], f"reloads with compute before their wait in the graph but none in the code: {lost}"


_SchedulerPass = getattr(custom_graph_pass, "CustomSchedulerPass", None)


def _user_pass(nodes):
    return nodes


def test_a_copy_of_the_pass_is_the_pass():
    # Inductor deep-copies and pickles its config: a copy must still be a
    # pass (a copy that came back as a tuple broke every later compile).
    for made in (graph_order_pass(), graph_order_pass(_user_pass)):
        for again in (copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
            assert type(again) is type(made) and again.inner is made.inner
            assert again([]) == []


@pytest.mark.skipif(_SchedulerPass is None, reason="this torch has no CustomSchedulerPass")
def test_the_cache_keys_on_the_pass_only_where_the_users_pass_says_what_it_does():
    calls = []

    class Keyed(_SchedulerPass):
        def __init__(self, key):
            self.key = key

        def __call__(self, nodes):
            calls.append(self.key)
            return nodes

        def uuid(self):
            return self.key

    alone = graph_order_pass()
    assert isinstance(alone, _SchedulerPass) and alone.uuid() is not None
    keyed_a, keyed_b = graph_order_pass(Keyed("a")), graph_order_pass(Keyed("b"))
    assert isinstance(keyed_a, _SchedulerPass) and keyed_a.uuid() != keyed_b.uuid() != alone.uuid()
    keyed_a([])
    assert calls == ["a"]  # the user's pass runs first
    # A plain function, or a pass without a uuid, says nothing a key could
    # hold: a plain callable, for which Inductor bypasses its cache.
    for inner in (_user_pass, Keyed(None)):
        made = graph_order_pass(inner)
        assert type(made) is GraphOrder and not isinstance(made, _SchedulerPass)
