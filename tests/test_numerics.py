"""Offloaded compile == plain Inductor compile: losses and gradients, several steps."""

import pytest
import torch

import offload_pass
from offload_pass import runtime
from offload_pass.examples.models import make_decoder

from helpers import DEVICES
from helpers import assert_same_training, same_kernel_configs

MARKS = {
    "attn+mlp pattern": lambda m: offload_pass.offload_modules(m, "layers.*.attn", "layers.*.mlp"),
    "class": lambda m: offload_pass.offload_modules(m, offload_pass.examples.models.MLP),
    "whole layer": lambda m: offload_pass.offload_modules(m, "layers.0"),
    "root": lambda m: offload_pass.offload_modules(m, m),
    "layer kept mlp": lambda m: (
        offload_pass.offload_modules(m, "layers.*"),
        offload_pass.keep_modules(m, "layers.*.mlp"),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mark", list(MARKS))
def test_decoder_gradients_match(device, mark):
    model = make_decoder(layers=3, hidden=32, heads=4, device=device)
    x = torch.randn(2, 16, 32, device=device)
    runtime.reset_stats()
    backend = assert_same_training(model, MARKS[mark], (x,), steps=3)
    plan = backend.plans[-1]
    assert plan.offloaded, f"{mark}: nothing was offloaded\n{plan}"
    stats = runtime.stats()
    # Every step copies each offloaded storage out once and back once.
    assert stats["offload_calls"] == 3 * len([g for g in plan.groups for _ in ([g.members] if g.copy != "each" else g.members)])
    assert stats["offload_bytes"] == 3 * plan.offloaded_bytes
    assert stats["reload_bytes"] == stats["offload_bytes"]
    assert runtime.pending_events() == (0, 0)
    # Each copy read the buffer its release waited for (no temporary the
    # compiler made for the op, rewriting/copy_source.py; counted on both
    # devices).
    assert stats["temporary_sources"] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_decoder_matches(device):
    model = make_decoder(layers=2, hidden=32, heads=4, dtype=torch.bfloat16, device=device)
    x = torch.randn(2, 16, 32, device=device, dtype=torch.bfloat16)
    # Same kernels on both sides, so bf16 results are bit-identical.
    with same_kernel_configs():
        assert_same_training(model, MARKS["attn+mlp pattern"], (x,), steps=2, atol=0, rtol=0)
