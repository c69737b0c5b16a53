"""Causal fused attention is priced at the share of (query, key) pairs its
mask leaves: the forward and the backward op of each kernel family, traced
with autograd so the real aten ops appear (the CPU's op from
``F.scaled_dot_product_attention`` on the CPU, the CUDA ops on the meta device)."""

from fractions import Fraction

import functools

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from offload_pass.planning.causal_attention import Align, causal_pairs
from offload_pass.planning.cost_model import _flops, device_profile, estimate_node_ms

aten = torch.ops.aten
B, H, D = 2, 4, 16


def _bshd(t):
    return t.transpose(1, 2)


# Each kernel family: how to call its forward (q, k, v in (B, H, seq, D)),
# the device it is traced on, and its forward and backward ops.
_FAMILIES = {
    "cpu": (lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v, is_causal=c), "cpu",
            aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention_for_cpu_backward),
    "flash": (lambda q, k, v, c: aten._scaled_dot_product_flash_attention(q, k, v, 0.0, c)[0], "meta",
              aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_flash_attention_backward),
    "efficient": (lambda q, k, v, c: aten._scaled_dot_product_efficient_attention(q, k, v, None, True, 0.0, c)[0], "meta",
                  aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_efficient_attention_backward),
    "cudnn": (lambda q, k, v, c: aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, is_causal=c)[0], "meta",
              aten._scaled_dot_product_cudnn_attention, aten._scaled_dot_product_cudnn_attention_backward),
    "raw_flash": (lambda q, k, v, c: _bshd(aten._flash_attention_forward(
        _bshd(q), _bshd(k), _bshd(v), None, None, q.shape[2], k.shape[2], 0.0, c, False)[0]), "meta",
        aten._flash_attention_forward, aten._flash_attention_backward),
    "raw_efficient": (lambda q, k, v, c: _bshd(aten._efficient_attention_forward(
        _bshd(q), _bshd(k), _bshd(v), None, None, None, None, None, 0.0, int(c), True)[0]), "meta",
        aten._efficient_attention_forward, aten._efficient_attention_backward),
    # causal_lower_right's path: custom_mask_type 2 (bottom-right), by keyword.
    "raw_efficient_lower_right": (lambda q, k, v, c: _bshd(aten._efficient_attention_forward(
        _bshd(q), _bshd(k), _bshd(v), None, None, None, None, None, dropout_p=0.0,
        custom_mask_type=2 if c else 0, compute_log_sumexp=True)[0]), "meta",
        aten._efficient_attention_forward, aten._efficient_attention_backward),
}


def _priced(family: str, queries: int, keys: int, causal: bool) -> dict:
    """The FLOPs of the forward and the backward attention op of ``family``."""
    call, device, forward, backward = _FAMILIES[family]

    def step(q, k, v, grad):
        return torch.autograd.grad(call(q, k, v, causal), (q, k, v), grad)

    q = torch.randn(B, H, queries, D, device=device, requires_grad=True)
    k, v = (torch.randn(B, H, keys, D, device=device, requires_grad=True) for _ in range(2))
    gm = make_fx(step, tracing_mode="fake")(q, k, v, torch.randn(B, H, queries, D, device=device))
    flops = {n.target.overloadpacket: _flops(n) for n in gm.graph.nodes if isinstance(n.target, torch._ops.OpOverload)}
    return {"forward": flops[forward], "backward": flops[backward]}


# Full attention's price before causal pricing: the forward's two matmuls
# (Q K^T, P V) and the backward's five, each 2 * B * H * L * S * D.
def _full(queries: int, keys: int) -> dict:
    return {"forward": 4 * B * H * queries * keys * D, "backward": 10 * B * H * queries * keys * D}


_TOP_LEFT = ("cpu", "efficient", "cudnn", "raw_efficient")
_BOTTOM_RIGHT = ("flash", "raw_flash", "raw_efficient_lower_right")

# (family, L, S, the share of pairs computed under a causal mask)
_CASES = [
    *((f, 8, 8, Fraction(9, 16)) for f in _TOP_LEFT + _BOTTOM_RIGHT),  # (S + 1) / (2 S)
    *((f, 64, 64, Fraction(65, 128)) for f in ("cpu", "flash")),
    *((f, 4, 8, Fraction(1 + 2 + 3 + 4, 32)) for f in _TOP_LEFT),  # query i sees keys 0..i
    *((f, 4, 8, Fraction(5 + 6 + 7 + 8, 32)) for f in _BOTTOM_RIGHT),  # query i sees keys 0..i+4
    *((f, 1, 8, Fraction(1, 8)) for f in _TOP_LEFT),  # one query sees one key
    *((f, 1, 8, Fraction(1)) for f in _BOTTOM_RIGHT),  # a decode step sees all keys
]


@pytest.mark.parametrize("family, queries, keys, share", _CASES)
def test_causal_attention_priced_at_its_share(family, queries, keys, share):
    full = _full(queries, keys)
    assert _priced(family, queries, keys, causal=False) == full
    causal = _priced(family, queries, keys, causal=True)
    assert causal == {side: full[side] * share for side in full}
    if queries == keys:
        assert causal["forward"] * 2 * keys == full["forward"] * (keys + 1)


def test_non_causal_prices_unchanged():
    # The values the cost model gave full attention before causal pricing.
    for family in ("cpu", "flash", "efficient", "cudnn"):
        assert _priced(family, 8, 8, causal=False) == {"forward": 32768, "backward": 81920}
        assert _priced(family, 4, 8, causal=False) == {"forward": 16384, "backward": 40960}


@pytest.mark.parametrize(
    "queries, keys, align, pairs",
    [(5, 5, Align.TOP_LEFT, 15), (5, 5, Align.BOTTOM_RIGHT, 15), (3, 4, Align.TOP_LEFT, 6),
     (3, 4, Align.BOTTOM_RIGHT, 9), (6, 3, Align.TOP_LEFT, 15), (6, 3, Align.BOTTOM_RIGHT, 6)],
)
def test_causal_pairs_match_the_masks(queries, keys, align, pairs):
    offset = 0 if align is Align.TOP_LEFT else keys - queries
    mask = torch.ones(queries, keys, dtype=torch.bool).tril(diagonal=offset)
    assert causal_pairs(queries, keys, align) == int(mask.sum()) == pairs


def _attention_flops(fn, *inputs) -> list:
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    return [_flops(n) for n in gm.graph.nodes if "attention" in str(n.target)]


def test_a_given_mask_keeps_full_price():
    q, mask = torch.randn(B, H, 8, D), torch.zeros(8, 8)
    full = 4 * B * H * 8 * 8 * D
    # The CPU op with is_causal and an attn_mask; SDPA with a mask.
    assert _attention_flops(
        lambda q, m: aten._scaled_dot_product_flash_attention_for_cpu(q, q, q, 0.0, True, attn_mask=m)[0], q, mask
    ) == [full]
    assert _attention_flops(lambda q, m: F.scaled_dot_product_attention(q, q, q, attn_mask=m), q, mask) == [full]
    meta_q, bias = torch.randn(B, H, 8, D, device="meta"), torch.zeros(B, H, 8, 8, device="meta")
    assert _attention_flops(
        lambda q, b: aten._scaled_dot_product_efficient_attention(q, q, q, b, False, 0.0, True)[0], meta_q, bias
    ) == [full]


def test_causal_attention_estimated_faster():
    profile = device_profile(torch.device("cpu"))

    def attention_ms(causal: bool) -> float:
        gm = make_fx(lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=causal), tracing_mode="fake")(
            torch.randn(1, 8, 512, 64)
        )
        times = dict(zip(gm.graph.nodes, estimate_node_ms(gm, profile)))
        return next(ms for n, ms in times.items() if "attention" in str(n.target))

    full, causal = attention_ms(False), attention_ms(True)
    launch = profile.launch_us / 1e3
    assert (causal - launch) / (full - launch) == pytest.approx(513 / 1024, rel=1e-9)


@functools.lru_cache(maxsize=1)
def _plain_and_cut():
    """A tiny Llama shape planned offline twice: as configured, and with every
    block recomputed from its input (its attention in RNG wrappers)."""
    import dataclasses

    import offload_pass.offline.planner as planner
    from offload_pass.config import OffloadConfig
    from offload_pass.examples.models import llama_shape
    from offload_pass.offline import plan_offline
    from offload_pass.pipeline.passes import PlanRequest, run_attempt
    from offload_pass.planning.blocks import BlockCut, find_blocks

    got = {}

    def attempts(ctx):
        of = len(find_blocks(ctx.joint.graph))
        got["plain"] = run_attempt(dataclasses.replace(ctx, request=PlanRequest()))
        got["cut"] = run_attempt(dataclasses.replace(ctx, request=PlanRequest(level=BlockCut(of, of)), seen=set()))
        return got["cut"]

    original = planner.run_pipeline
    planner.run_pipeline = attempts
    try:
        model, inputs = llama_shape(2048, 2, 256, 4, 2, 512, 256)
        plan_offline(model, (), inputs, config=OffloadConfig(), device_profile="h200")
    finally:
        planner.run_pipeline = original
    return got["plain"], got["cut"]


def test_an_rng_wrapper_is_priced_as_the_op_it_runs():
    # PyTorch's partitioner wraps the random ops it recomputes (fused
    # attention among them) in run_and_save_rng_state / run_with_rng_state:
    # each is priced as the attention it runs, in the forward and in the
    # recompute alike.
    from offload_pass.planning.cost_model import estimate_node_ms
    from offload_pass.planning.profiles import named_profile

    plain, cut = _plain_and_cut()
    profile = named_profile("h200")

    def priced(gm):
        return {n.name: ms for n, ms in zip(gm.graph.nodes, estimate_node_ms(gm, profile))}

    attention = priced(plain.fw_gm)["_scaled_dot_product_flash_attention_for_cpu"]
    assert attention > 1e-3
    forward, backward = priced(cut.fw_gm), priced(cut.bw_gm)
    wrapped = [ms for name, ms in forward.items() if name.startswith("run_and_save_rng_state")]
    recomputed = [ms for name, ms in backward.items() if name.startswith("run_with_rng_state")]
    assert len(wrapped) == len(recomputed) == 2
    # The same kernel (the recompute also reads the saved random state: a few bytes more).
    assert all(ms == pytest.approx(attention, rel=1e-3) for ms in wrapped + recomputed), (attention, wrapped, recomputed)
    # The cut recomputes the forward: its predicted step is above the one without recompute.
    assert cut.plan.prediction.step_ms > plain.plan.prediction.step_ms


def test_an_rng_wrapper_is_timed_as_the_op_it_runs(monkeypatch):
    # On a GPU each extern kernel is timed once per signature: a wrapper is
    # timed as the op it runs, under that op's signature, so the recompute
    # and the kernel it repeats read one figure. (The CPU's attention and a
    # signature that ignores the device stand in for CUDA's here.)
    from offload_pass.planning import kernel_timing
    from offload_pass.registry import REGISTRY

    plain, cut = _plain_and_cut()
    cpu_attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    monkeypatch.setattr(kernel_timing, "MEASURED_OPS", frozenset({cpu_attention}))

    def signature(op):
        return "|".join([str(op.target)] + [
            str(tuple(a.meta["val"].shape)) for a in op.args if isinstance(a, torch.fx.Node)
        ])

    timed = []

    def measure(op):
        timed.append(signature(op))
        return kernel_timing.KernelTime(1.0 + len(timed), 0.0)

    monkeypatch.setattr(kernel_timing, "_signature", signature)
    monkeypatch.setattr(kernel_timing, "_measure", measure)
    monkeypatch.setattr(REGISTRY, "kernel_times", {})
    original = kernel_timing._measure_graph(plain.fw_gm)
    forward = kernel_timing._measure_graph(cut.fw_gm)
    backward = kernel_timing._measure_graph(cut.bw_gm)
    assert sorted(original) == ["_scaled_dot_product_flash_attention_for_cpu",
                                "_scaled_dot_product_flash_attention_for_cpu_1"]
    wrappers = [n for n in (*forward, *backward) if n.startswith(("run_and_save_rng_state", "run_with_rng_state"))]
    assert len(wrappers) == 4, (forward, backward)
    # One measurement per signature: both layers' attention share one, the wrappers reuse it.
    assert len(timed) == 1, timed
    assert {t.device_ms for t in (*original.values(), *forward.values(), *backward.values())} == {2.0}


def test_the_graphsafe_rng_wrapper_of_one_cuda_device_is_priced_as_its_op():
    # On one CUDA device PyTorch's partitioner wraps both the forward and the
    # recompute in graphsafe_run_with_rng_state(op, *args, rng_state=...):
    # the same node, rewritten so on the CPU's graph, is priced as the op.
    import copy

    from torch._prims.rng_prims import graphsafe_run_with_rng_state

    from offload_pass.planning.cost_model import estimate_node_ms
    from offload_pass.planning.profiles import named_profile
    from offload_pass.planning.rng_wrappers import rng_wrapped

    plain, _ = _plain_and_cut()
    gm = copy.deepcopy(plain.fw_gm)
    graph = gm.graph
    attention = next(n for n in graph.nodes if n.name == "_scaled_dot_product_flash_attention_for_cpu")
    with graph.inserting_before(next(iter(graph.find_nodes(op="placeholder")))):
        state = graph.placeholder("fwd_rng_state_0")
    with graph.inserting_after(attention):
        wrapped = graph.call_function(
            graphsafe_run_with_rng_state, (attention.target, *attention.args), {**attention.kwargs, "rng_state": state}
        )
    wrapped.meta["val"] = None  # as the partitioner leaves it
    found = rng_wrapped(wrapped)
    assert found is not None and found.target is attention.target and found.name == wrapped.name
    assert "rng_state" not in found.kwargs and found.args == tuple(attention.args)
    times = {n.name: ms for n, ms in zip(graph.nodes, estimate_node_ms(gm, named_profile("h200")))}
    assert times[wrapped.name] == pytest.approx(times[attention.name], rel=1e-6)
