"""Planning offline: a model on the meta device planned for a named GPU.

The offline trace must give the graphs a real compile gives (the same saved
tensors, by name, shape and bytes, as the model compiled on the CPU with
real weights), price them at the traced shapes, allocate nothing of the
model, and leave plain torch.compile untouched.
"""

from __future__ import annotations

import functools
import json
import resource

import pytest
import torch

from offload_pass.backend import make_backend
from offload_pass.config import OffloadConfig
from offload_pass.examples.models import llama3_8b_shape, llama_shape, make_decoder
from offload_pass.marking.markers import offload_modules
from offload_pass.offline import plan_offline
from offload_pass.offline.meta_trace import stub_compile
from offload_pass.planning.profiles import PROFILE_NAMES, device_memory, named_profile


def _saved(plan) -> list[tuple]:
    return [(e.name, tuple(e.shape), e.nbytes) for e in plan.entries]


def _cpu_plan(monkeypatch, model, args=(), kwargs=None, config=None):
    """The plan of ``model`` compiled on the CPU with real tensors by the
    offload backend, Inductor's pipeline as ever but no kernel compiled."""
    import torch._inductor.compile_fx as compile_fx

    monkeypatch.setattr(compile_fx, "compile_fx", functools.partial(compile_fx.compile_fx, inner_compile=stub_compile))
    backend = make_backend(config or OffloadConfig(min_bytes=0))
    torch.compile(model, backend=backend)(*args, **(kwargs or {}))
    assert len(backend.plans) == 1
    return backend.plans[0]


def _decoder(device: str):
    model = make_decoder(layers=2, hidden=64, heads=4, dtype=torch.bfloat16, device=device)
    offload_modules(model, "layers.*.attn", "layers.*.mlp")
    return model


def test_named_profiles(monkeypatch, tmp_path):
    h200, h100 = named_profile("h200"), named_profile("H100")
    assert h200.matmul_tflops["bfloat16"] > 500 and 40 < h200.d2h_gbps < 64
    assert h100.memory_gbps < h200.memory_gbps and device_memory("h100") < device_memory("h200")
    with pytest.raises(ValueError, match="'h100', 'h200', 'measured'"):
        named_profile("h300")
    monkeypatch.setenv("OFFLOAD_PASS_CACHE_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="found: none"):
        named_profile("measured")
    from offload_pass.planning.cost_model import _PROFILE_VERSION

    fields = {"d2h_gbps": 20.0, "h2d_gbps": 21.0, "matmul_tflops": {"bfloat16": 100.0}, "memory_gbps": 900.0,
              "launch_us": 5.0, "host_launch_us": 7.0}
    key = f"NVIDIA A10 | torch {torch.__version__} | v{_PROFILE_VERSION}"
    (tmp_path / "device_profile.json").write_text(json.dumps({key: fields}))
    measured = named_profile("measured")
    assert (measured.d2h_gbps, measured.h2d_gbps, measured.host_launch_us) == (20.0, 21.0, 7.0)
    assert named_profile("measured:nvidia a10") == measured and "measured" in PROFILE_NAMES


def test_decoder_saves_what_the_cpu_compile_saves(monkeypatch):
    x = torch.randn(2, 128, 64, dtype=torch.bfloat16)
    made = plan_offline(_decoder("meta"), (x,), config=OffloadConfig(min_bytes=0), device_profile="h200")
    offline = made.plans[0]
    assert _saved(offline) == _saved(_cpu_plan(monkeypatch, _decoder("cpu"), (x,)))
    # The fused attention saves its output and row log-sum-exp, never the s x s scores.
    ops = {e.op for e in offline.entries}
    assert "aten._scaled_dot_product_flash_attention_for_cpu[1]" in ops
    assert not any(tuple(e.shape[-2:]) == (128, 128) for e in offline.entries)
    assert offline.offloaded and offline.prediction.peak < offline.baseline.peak
    assert "named h200" in offline.prediction.times
    assert made.graphs[0].planning_s > 0 and made.graphs[0].pytorch_partition_s > 0


def test_hf_llama_with_its_loss_saves_what_the_cpu_compile_saves(monkeypatch):
    model, inputs = llama_shape(64, 1, 64, 4, 2, 128, 256, dtype=torch.float32)
    offload_modules(model, "model.layers.*.self_attn", "model.layers.*.mlp")
    offline = plan_offline(model, (), inputs, config=OffloadConfig(min_bytes=0)).plans[0]
    torch.manual_seed(0)
    real = type(model)(model.config).float()
    offload_modules(real, "model.layers.*.self_attn", "model.layers.*.mlp")
    ids = torch.randint(0, 256, (1, 64))
    cpu = _cpu_plan(monkeypatch, real, kwargs={"input_ids": ids, "labels": ids})
    # The cross entropy's backward is in both joint graphs (on meta its
    # decomposition must not hide behind its meta kernel): its saved log-sum-exp too.
    assert _saved(offline) == _saved(cpu)
    assert {"amax", "log"} <= {e.name for e in offline.entries}


def _activation_bytes(plan) -> int:
    return sum(e.nbytes for e in plan.entries if e.op != "placeholder")


def test_bytes_and_time_at_the_traced_shapes():
    config = OffloadConfig(min_bytes=0)
    short, long = (
        plan_offline(_decoder("meta"), (torch.empty(1, seq, 64, dtype=torch.bfloat16),), config=config).plans[0]
        for seq in (512, 1024)
    )
    assert _activation_bytes(long) == 2 * _activation_bytes(short)
    assert 1.8 < long.baseline.timeline_peak / short.baseline.timeline_peak <= 2.0
    # Attention is priced, and grows with the square of the sequence.
    from offload_pass.planning.cost_model import _flops
    from torch.fx.experimental.proxy_tensor import make_fx

    def attention(q):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q, 0.0, True)[0]

    def flops(seq: int) -> int:
        gm = make_fx(attention, tracing_mode="fake")(torch.empty(1, 4, seq, 16))
        return sum(_flops(n) for n in gm.graph.nodes if "attention" in str(n.target))

    # Causal (is_causal=True): the (S + 1) / 2S share of the pairs a full one computes.
    assert flops(256) == 4 * 4 * 256 * 257 * 16 // 2 and flops(512) == 4 * 4 * 512 * 513 * 16 // 2


def test_llama_8b_shape_allocates_nothing():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model, inputs = llama3_8b_shape(seq=256, layers=1)
    made = plan_offline(model, (), inputs, device_profile="h100")
    grown_gib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 2**20
    # One layer, the embedding and the head: 2.5 GB of bf16 weights, were they allocated.
    assert grown_gib < 1.0
    plan = made.plans[0]
    weights = sum(p.numel() * 2 for p in model.parameters())
    assert weights > 2e9 and plan.baseline.peak > weights
    assert made.device_memory == device_memory("h100")


def test_errors_and_state_restored():
    with pytest.raises(ValueError, match="parameter 'layers.0.attn_norm.weight' is on cpu"):
        plan_offline(_decoder("cpu"), (torch.randn(1, 8, 64),))
    with pytest.raises(ValueError, match="no device profile named 'a100'"):
        plan_offline(_decoder("meta"), (torch.randn(1, 8, 64),), device_profile="a100")
    plan_offline(_decoder("meta"), (torch.randn(1, 16, 64, dtype=torch.bfloat16),))
    from torch._C import DispatchKey
    from torch._inductor.fx_passes import joint_graph

    assert DispatchKey.AutogradMeta not in torch.ops.aten.nll_loss.default.py_kernels
    assert joint_graph.constant_fold_uniform_value.__name__ == "constant_fold_uniform_value"


def test_plain_compile_untouched(monkeypatch):
    """After planning offline, the offload backend plans a CPU graph as ever:
    CPU figures, none of the named profile's."""
    plan_offline(_decoder("meta"), (torch.randn(1, 16, 64, dtype=torch.bfloat16),))
    plan = _cpu_plan(monkeypatch, _decoder("cpu"), (torch.randn(1, 16, 64, dtype=torch.bfloat16),))
    assert "named" not in plan.baseline.times and "cpu defaults" in plan.baseline.times


def test_explain_plans_offline(capsys):
    from offload_pass.examples.explain import main

    assert main(["--device-profile", "h200", "--graphs", "diff"]) == 0
    out = capsys.readouterr().out
    assert "planned offline for h200" in out and "graph 0 forward" in out and "PyTorch's partitioner" in out


def test_a_profile_on_real_cpu_tensors_still_counts_them():
    """A graph on real CPU tensors planned under a profile: its tensors are
    the memory its peak is made of (a meta graph's always are)."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from offload_pass.pipeline.passes import PassContext, run_attempt

    peaks = {}

    def partition(joint, joint_inputs, **kwargs):
        for name, profile in (("none", None), ("h200", named_profile("h200"))):
            ctx = PassContext(
                OffloadConfig(), joint, joint_inputs, kwargs, "graph 0", "", None, False, profile=profile,
            )
            peaks[name] = run_attempt(ctx).baseline.timeline_peak
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm, partition_fn=partition)
    torch.compile(_decoder("cpu"), backend=backend)(torch.randn(2, 64, 64, dtype=torch.bfloat16)).float().backward()
    assert peaks["h200"] == peaks["none"] > 0
