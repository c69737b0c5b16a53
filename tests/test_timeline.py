"""The simulated memory timeline: what the schedules and the no-gain trim
believe is alive. A wrong count here silently changes which copies are kept."""

import torch
import torch.fx as fx

import offload_pass
from offload_pass.models import make_decoder
from offload_pass.timeline import fused_away, safe_slots


def _graph(build) -> fx.Graph:
    graph = fx.Graph()
    x = graph.placeholder("x")
    w = graph.placeholder("w")
    graph.output(build(graph, x, w))
    return graph


def _nodes(graph: fx.Graph) -> dict[str, fx.Node]:
    """call_function nodes by their op's name ("mul", "add", ...)."""
    return {n.target._opname: n for n in graph.nodes if n.op == "call_function"}


def test_pointwise_read_only_by_pointwise_ops_isfused_away():
    aten = torch.ops.aten

    def build(g, x, w):
        a = g.call_function(aten.mul.Tensor, (x, 2.0))
        b = g.call_function(aten.add.Tensor, (a, 1.0))
        return g.call_function(aten.sum.default, (b,))

    nodes = _nodes(_graph(build))
    assert fused_away(nodes["mul"]) and fused_away(nodes["add"])


def test_pointwise_behind_a_view_that_is_saved_or_multiplied_is_in_memory():
    aten = torch.ops.aten

    def saved(g, x, w):
        a = g.call_function(aten.mul.Tensor, (x, 2.0))
        return (g.call_function(aten.view.default, (a, [-1])),)

    def matmul(g, x, w):
        a = g.call_function(aten.mul.Tensor, (x, 2.0))
        v = g.call_function(aten.view.default, (a, [4, 4]))
        return g.call_function(aten.mm.default, (v, w))

    def fused_view(g, x, w):
        a = g.call_function(aten.mul.Tensor, (x, 2.0))
        v = g.call_function(aten.view.default, (a, [4, 4]))
        return g.call_function(aten.sum.default, (g.call_function(aten.relu.default, (v,)),))

    assert not fused_away(_nodes(_graph(saved))["mul"])
    assert not fused_away(_nodes(_graph(matmul))["mul"])
    assert fused_away(_nodes(_graph(fused_view))["mul"])


def test_forward_end_holds_exactly_the_saved_tensors():
    # At the forward/backward boundary the device holds what backward needs
    # (every saved storage once) plus the loss. Saved norm outputs are views
    # of pointwise results: counting them as fused away once dropped a third
    # of the saved bytes and made the no-gain trim keep most marked tensors.
    torch.manual_seed(0)
    model = make_decoder(2, 64, 4)
    offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    torch.compile(model, backend=backend)(torch.randn(2, 16, 64)).backward()
    timeline = backend.timelines[-1]["before"]
    plan = backend.plans[-1]
    saved = sum(e.nbytes for e in plan.entries if e.op != "placeholder")
    loss = 4  # the float32 scalar the forward returns
    assert timeline.forward_end == saved + loss


def test_safe_slots_are_next_to_extern_ops_only():
    aten = torch.ops.aten

    def build(g, x, w):
        a = g.call_function(aten.mul.Tensor, (x, 2.0))
        b = g.call_function(aten.tanh.default, (a,))
        c = g.call_function(aten.mm.default, (b, w))
        d = g.call_function(aten.relu.default, (c,))
        return g.call_function(aten.add.Tensor, (d, 1.0))

    graph = _graph(build)
    nodes = [n for n in graph.nodes if n.op != "output"]
    slots = dict(zip((n.name.split("_")[0] for n in nodes), safe_slots(nodes)))
    # x, w | mul | tanh | mm | relu | add: only the pointwise pairs (mul, tanh)
    # and (relu, add) would be split by an op between them.
    assert slots == {"x": True, "w": True, "mul": False, "tanh": True, "mm": True, "relu": False, "add": True}
