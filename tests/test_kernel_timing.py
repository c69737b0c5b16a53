"""Measured extern-kernel times (planning/kernel_timing.py) for the step simulator."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import offload_pass
from offload_pass.examples.models import make_decoder
from offload_pass.planning.kernel_timing import measured_kernel_times
from offload_pass.registry import REGISTRY


def _graph(device: str) -> torch.fx.GraphModule:
    def f(a, b, c):
        return torch.relu(a @ b) @ c

    args = [torch.randn(256, 512, device=device), torch.randn(512, 1024, device=device), torch.randn(1024, 64, device=device)]
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) for a in args]
        return make_fx(f, tracing_mode="fake")(*fake)


def test_cpu_graph_is_not_measured():
    gm = _graph("cpu")
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"].count(torch.ops.aten.mm.default) == 2
    assert measured_kernel_times(gm) == {}
    assert REGISTRY.kernel_times == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matmuls_are_measured_once_per_signature():
    gm = _graph("cuda")
    got = measured_kernel_times(gm)
    mms = [n.name for n in gm.graph.nodes if n.target == torch.ops.aten.mm.default]
    assert sorted(got) == sorted(mms)  # the relu is left to the estimate
    assert all(0 < t.device_ms < 100 and 0 < t.host_ms < 100 for t in got.values()), got
    assert len(REGISTRY.kernel_times) == 2
    # Measured once: a second look finds them cached.
    assert measured_kernel_times(gm) == got


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_plan_says_its_kernels_were_measured():
    torch.manual_seed(0)
    model = make_decoder(layers=2, hidden=256, heads=4).cuda()
    offload_pass.offload_modules(model, "layers.*.attn")
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    torch.compile(model, backend=backend)(torch.randn(2, 512, 256, device="cuda")).backward()
    times = backend.plans[-1].prediction.times
    assert "extern kernels measured, the rest estimated" in times, times
    off = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, measure_kernels=False)
    torch._dynamo.reset()
    torch.compile(model, backend=off)(torch.randn(2, 512, 256, device="cuda")).backward()
    assert off.plans[-1].prediction.times.startswith("estimated ("), off.plans[-1].prediction.times
