"""The simulated memory timeline: what the schedules and the no-gain trim
believe is alive. A wrong count here silently changes which copies are kept."""

import operator

import torch
import torch.fx as fx

import offload_pass
from offload_pass.examples.models import make_decoder
from offload_pass.planning.inductor_model import fused_away, safe_slots


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
    timeline = backend.records[-1].timeline_before
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


def _meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_a_node_holds_its_dying_inputs_its_outputs_and_its_scratch(monkeypatch):
    # The measured peak of an offloaded decoder step sat inside the attention
    # backward: inputs that die there, all three outputs and the kernel's
    # scratch at once. The timeline used to count the outputs only after the
    # inputs were freed, and no scratch: 300 MiB under the measured peak.
    from offload_pass.planning import timeline as tl
    from offload_pass.registry import REGISTRY

    aten = torch.ops.aten
    g = fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    x.meta["val"], w.meta["val"] = _meta(16, 16), _meta(16, 16)
    a = g.call_function(aten.mm.default, (x, w))
    a.meta["val"] = _meta(16, 16)  # 1024 bytes, read last by var_mean
    vm = g.call_function(aten.var_mean.correction, (a, [1]))
    vm.meta["val"] = (_meta(16), _meta(16))  # 64 + 64 bytes
    var = g.call_function(operator.getitem, (vm, 0))  # output 1 has no reader
    var.meta["val"] = _meta(16)
    b = g.call_function(aten.relu.default, (var,))
    b.meta["val"] = _meta(16)
    v = g.call_function(aten.view.default, (b, [4, 4]))
    v.meta["val"] = _meta(4, 4)
    c = g.call_function(aten.mm.default, (v, v))
    c.meta["val"] = _meta(4, 4)
    g.output((c,))
    monkeypatch.setitem(REGISTRY.workspaces, aten.var_mean.correction, lambda node: 1000)
    gm = fx.GraphModule(torch.nn.Module(), g)
    empty = fx.GraphModule(torch.nn.Module(), fx.Graph())
    empty.graph.output(())
    t = tl.simulate_step(gm, empty)
    at = dict(zip(t.nodes, t.live_bytes))
    assert at["mm_default"] == 1024
    # a (dies here) + var (its getitem owns it from here) + the unread mean + scratch
    assert at["var_mean_correction"] == 1024 + 64 + 64 + 1000
    assert at["getitem"] == 64
    # relu's input dies in relu and has relu's size: Inductor writes over it
    assert at["relu_default"] == 64
    assert at["mm_default_1"] == 64 + 64


def test_scratch_of_a_python_op_is_measured_on_meta_tensors():
    from offload_pass.planning.workspace import python_op_workspace

    n = 1 << 10

    def impl(x):
        a = x * 2
        b = a + 1
        del a
        return b * 3

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = _meta(n)
    node = g.call_function(torch.ops.aten.mul.Tensor, (x,))
    assert python_op_workspace(impl)(node) == 4 * n  # a or b beside the output


def test_grouped_mlp_backward_scratch_is_one_experts_activation_gradient():
    # Per expert: the fc2 input gradient (bf16), the act input gradient
    # (bf16, twice as wide for swiglu) and three fp32 temporaries; the
    # outputs are written in place, never concatenated.
    from offload_pass.examples.grouped_mlp import _grouped_mlp_bwd
    from offload_pass.planning.workspace import python_op_workspace

    hidden, ffn, counts = 64, 96, [40, 0, 100, 60]
    tokens, experts = sum(counts), len(counts)
    g = fx.Graph()
    args = []
    for name, shape in [
        ("grad", (tokens, hidden)), ("x", (tokens, hidden)), ("act", (tokens, 2 * ffn)),
        ("fc2", (tokens, ffn)), ("w1", (experts, hidden, 2 * ffn)), ("w2", (experts, ffn, hidden)),
    ]:
        p = g.placeholder(name)
        p.meta["val"] = _meta(*shape, dtype=torch.bfloat16)
        args.append(p)
    node = g.call_function(torch.ops.offload_pass.grouped_mlp_bwd.default, (*args, counts, "swiglu"))
    assert python_op_workspace(_grouped_mlp_bwd)(node) == max(counts) * ffn * (2 + 2 * 2 + 3 * 4)


def test_unbind_allocates_nothing():
    # unbind / split return views of their input: counting their outputs
    # put a false 190 MiB peak in the forward of an H100 decoder (q, k, v).
    from offload_pass.planning import timeline as tl, workspace

    aten = torch.ops.aten
    g = fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    x.meta["val"], w.meta["val"] = _meta(16, 16), _meta(16, 16)
    a = g.call_function(aten.mm.default, (x, w))
    a.meta["val"] = _meta(16, 16)
    parts = g.call_function(aten.unbind.int, (a,))
    parts.meta["val"] = tuple(_meta(16) for _ in range(16))
    first = g.call_function(operator.getitem, (parts, 0))
    first.meta["val"] = _meta(16)
    out = g.call_function(aten.mul.Tensor, (first, 2.0))
    out.meta["val"] = _meta(16)
    g.output((out,))
    empty = fx.GraphModule(torch.nn.Module(), fx.Graph())
    empty.graph.output(())
    t = tl.simulate_step(fx.GraphModule(torch.nn.Module(), g), empty)
    at = dict(zip(t.nodes, t.live_bytes))
    assert at["unbind_int"] == 1024 and at["getitem"] == 1024
    assert at["mul_tensor"] == 1024 + 64


def test_a_sum_read_only_by_gathers_is_never_in_memory():
    # Inductor lowers index / index_select / gather to pointwise loads: a
    # residual-gradient sum read by each layer's token gather was recomputed
    # in every gather's kernel on the H100, its summands kept alive.
    aten = torch.ops.aten

    def build(g, x, w):
        a = g.call_function(aten.mm.default, (x, w))
        b = g.call_function(aten.mm.default, (x, w))
        s = g.call_function(aten.add.Tensor, (a, b))
        idx = g.placeholder("idx")
        gathered = g.call_function(aten.index.Tensor, (s, [idx]))
        return g.call_function(aten.mm.default, (gathered, w))

    nodes = _nodes(_graph(build))
    assert fused_away(nodes["add"])
    assert not fused_away(nodes["index"])  # a matmul reads it


def test_the_gradients_a_backward_receives_are_alive_until_it_returns():
    # The autograd engine allocates a backward's incoming gradients (HF Llama:
    # the loss's, and zeros for the logits and the 16 KV-cache tensors it also
    # returns) before the backward runs and frees them when it returns. The
    # timeline once counted none of them: every first plan of HF Llama on the
    # H100 was 327 MiB (16-23 %) under the measured peak, which lay at the
    # backward's start with 320 MiB of such gradients alive.
    from offload_pass.planning import timeline as tl

    aten = torch.ops.aten
    fw = fx.Graph()
    x = fw.placeholder("x")
    x.meta["val"] = _meta(16, 16)
    s = fw.call_function(aten.mm.default, (x, x))
    s.meta["val"] = _meta(16, 16)  # 1024 bytes, saved for backward
    fw.output((s,))
    bw = fx.Graph()
    saved, tangent = bw.placeholder("mm_default"), bw.placeholder("tangents_1")
    saved.meta["val"], tangent.meta["val"] = _meta(16, 16), _meta(16, 16)
    g1 = bw.call_function(aten.mul.Tensor, (tangent, saved))  # the tangent's last read
    g1.meta["val"] = _meta(16, 16)
    g2 = bw.call_function(aten.mm.default, (g1, g1))
    g2.meta["val"] = _meta(16, 16)
    bw.output((g2,))
    module = torch.nn.Module()
    t = tl.simulate_step(fx.GraphModule(module, fw), fx.GraphModule(module, bw))
    at = dict(zip(t.nodes, t.live_bytes))
    assert t.forward_end == 1024  # the forward's input is outside the step
    # the tangent and the product, which Inductor writes over the saved
    # tensor dying there
    assert at["mul_tensor"] == 1024 + 1024
    # g1 (dies here) + g2 + the tangent, read last one node earlier
    assert at["mm_default_1"] == 1024 + 1024 + 1024
