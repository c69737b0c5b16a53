"""Fused grouped MLP ops: numerics against plain torch, op registration, and
what a compiled forward graph saves for backward."""

import copy

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func

from offload_pass.examples import grouped_mlp as gm
from offload_pass.marking.roles import roles_of

from helpers import DEVICES

FWD = torch.ops.offload_pass.grouped_mlp_fwd.default
BWD = torch.ops.offload_pass.grouped_mlp_bwd.default

# Uneven counts with an empty expert in the middle and one at the end.
COUNTS = [5, 0, 2, 9, 0]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def _inputs(device, dtype, activation, hidden=8, ffn=12, counts=COUNTS):
    g = torch.Generator().manual_seed(0)
    k = 2 if activation == "swiglu" else 1

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device, dtype).requires_grad_()

    x = rand(sum(counts), hidden)
    w1 = rand(len(counts), hidden, ffn * k, scale=hidden**-0.5)
    w2 = rand(len(counts), ffn, hidden, scale=ffn**-0.5)
    return x, w1, w2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", gm.ACTIVATIONS)
def test_fused_matches_reference(device, dtype, activation):
    x, w1, w2 = _inputs(device, dtype, activation)
    out, act_input, fc2_input = gm.grouped_mlp_fwd(x, w1, w2, COUNTS, activation)
    want = gm.grouped_mlp_reference(x, torch.tensor(COUNTS), w1, w2, activation)
    torch.testing.assert_close(out, want, **TOL[dtype])

    # The extra outputs are the fc1 output and the activation's output.
    ref_act = torch.cat([xe @ w1[e] for e, xe in enumerate(x.split(COUNTS))])
    torch.testing.assert_close(act_input, ref_act, **TOL[dtype])
    torch.testing.assert_close(fc2_input, gm._act(ref_act, activation), **TOL[dtype])
    assert not act_input.requires_grad and not fc2_input.requires_grad

    # Drawn from a generator of its own, as the inputs are: from the global
    # one, the draw depended on the tests run before on the same worker
    # (about 1 in 20 draws puts one bf16 w1 element past TOL).
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(device, dtype)
    got = torch.autograd.grad(out, (x, w1, w2), grad)
    ref = torch.autograd.grad(want, (x, w1, w2), grad)
    for name, a, b in zip(("x", "w1", "w2"), got, ref):
        torch.testing.assert_close(a, b, **TOL[dtype], msg=lambda m: f"grad {name}: {m}")
    # Experts without tokens get exactly zero weight gradients.
    for e in (1, 4):
        assert not got[1][e].any() and not got[2][e].any()


def test_gelu_backward_is_exact_erf_gelu():
    # Values where tanh-GELU and erf-GELU derivatives differ by > 1e-4.
    a = torch.linspace(-4, 4, 101, dtype=torch.float64, requires_grad=True)
    (want,) = torch.autograd.grad(torch.nn.functional.gelu(a).sum(), a)
    got = gm._act_backward(torch.ones_like(a), a.detach(), "gelu")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_bad_arguments_are_rejected():
    x, w1, w2 = _inputs("cpu", torch.float32, "gelu")
    with pytest.raises(RuntimeError, match="sum to"):
        gm.grouped_mlp_fwd(x, w1, w2, [1, 1, 1, 1, 1], "gelu")
    with pytest.raises(ValueError, match="activation"):
        gm.grouped_mlp_fwd(x, w1, w2, COUNTS, "tanh")
    with pytest.raises(RuntimeError, match="does not fit"):
        gm.grouped_mlp_fwd(x, w1, w2, COUNTS, "swiglu")


@pytest.mark.parametrize("activation", gm.ACTIVATIONS)
def test_opcheck(activation):
    x, w1, w2 = _inputs("cpu", torch.float32, activation, counts=[3, 0, 4])
    counts = [3, 0, 4]
    torch.library.opcheck(FWD, (x, w1, w2, counts, activation))
    with torch.no_grad():
        out, act_input, fc2_input = FWD(x, w1, w2, counts, activation)
    args = (torch.randn_like(out), x.detach(), act_input, fc2_input, w1.detach(), w2.detach())
    torch.library.opcheck(BWD, (*args, counts, activation))


def test_roles_registered():
    roles = roles_of(FWD)
    assert roles is not None
    assert dict(roles.inputs) == {0: "fc1"}
    assert dict(roles.outputs) == {1: "act", 2: "fc2"}
    assert set(gm.GroupedMLP.offload_roles) == set(roles.all_roles)


def _step(model, x):
    model.zero_grad(set_to_none=True)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("activation", gm.ACTIVATIONS)
def test_compiled_block_matches_eager(device, activation):
    torch.manual_seed(0)
    # 10 tokens over 4 experts: uneven counts (3, 3, 2, 2).
    eager = gm.MoEBlock(16, 24, 4, activation, device=device)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, backend="inductor", fullgraph=True)
    x = torch.randn(2, 5, 16, device=device)
    want_loss, want_grads = _step(eager, x)
    for _ in range(2):
        compiled_model.zero_grad(set_to_none=True)
        loss = compiled(x).float().pow(2).mean()
        loss.backward()
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
        for name, p in compiled_model.named_parameters():
            torch.testing.assert_close(p.grad, want_grads[name], rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")


def test_compiled_forward_saves_fc1_act_fc2():
    graphs = []

    def fw_compiler(gm_, example_inputs):
        graphs.append(gm_)
        return make_boxed_func(gm_.forward)

    def bw_compiler(gm_, example_inputs):
        return make_boxed_func(gm_.forward)

    backend = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)
    torch.manual_seed(0)
    model = gm.MoEBlock(16, 24, 4, "swiglu")
    x = torch.randn(10, 16, requires_grad=True)
    torch.compile(model, backend=backend, fullgraph=True)(x).sum().backward()
    assert len(graphs) == 1

    graph = graphs[0].graph
    (fused,) = [n for n in graph.nodes if n.target is FWD]
    saved = graph.output_node().args[0]
    saved_getitems = {
        n.args[1] for n in saved if isinstance(n, torch.fx.Node) and n.op == "call_function"
        and n.args and n.args[0] is fused
    }
    assert saved_getitems == {1, 2}
    fc1_input = fused.args[0]
    assert fc1_input.op == "call_function", "the fc1 input is the routed (gathered) tokens"
    assert fc1_input in saved
    # Weights are saved as the graph inputs they are.
    assert fused.args[1] in saved and fused.args[2] in saved


def test_fused_mlp_has_flop_counts_for_the_cost_model():
    # Without a formula the cost model sees the fused MLP as free, predicts
    # a forward far shorter than it is, and issues its reloads too late.
    from torch.utils.flop_counter import FlopCounterMode

    x, w1, w2 = torch.randn(64, 32), torch.randn(4, 32, 128), torch.randn(4, 64, 32)
    fc1_and_fc2 = 2 * 64 * 32 * 128 + 2 * 64 * 64 * 32
    with FlopCounterMode(display=False) as forward:
        torch.ops.offload_pass.grouped_mlp_fwd(x, w1, w2, [16] * 4, "swiglu")
    out, act, fc2 = torch.ops.offload_pass.grouped_mlp_fwd(x, w1, w2, [16] * 4, "swiglu")
    with FlopCounterMode(display=False) as backward:
        torch.ops.offload_pass.grouped_mlp_bwd(torch.ones_like(out), x, act, fc2, w1, w2, [16] * 4, "swiglu")
    assert forward.get_total_flops() == fc1_and_fc2
    assert backward.get_total_flops() == 2 * fc1_and_fc2
