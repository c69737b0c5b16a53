"""A marked model behaves as a model: its state_dict saves and loads into a
fresh model (marked or not), ``.to(dtype)`` / ``.to("cpu")`` keep its marks,
and ``clear_marks`` on a deep copy clears the copy only. Each model runs its
own weights and gradients land on its own parameters: checked bit for bit
(fp32) against an unmarked copy compiled by plain Inductor."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn as nn

import offload_pass
from offload_pass import runtime

from helpers import TwoBlockNet


def _step(model, backend, x):
    """One compiled fwd+bwd: the loss, each parameter's gradient, and how many
    tensors the runtime offloaded."""
    model.zero_grad(set_to_none=True)
    runtime.reset_stats()
    loss = torch.compile(model, backend=backend)(x)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return loss.detach(), grads, runtime.stats()["offload_calls"]


def _assert_equal_to_plain(model, x, offloads):
    """``model`` compiled with the offload backend: loss and gradients equal,
    bit for bit, an unmarked copy's compiled by plain Inductor; ``offloads``
    tensors moved."""
    plain = copy.deepcopy(model)
    offload_pass.clear_marks(plain)
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    loss, grads, moved = _step(model, backend, x)
    want_loss, want_grads, _ = _step(plain, "inductor", x)
    assert moved == offloads, (moved, offloads)
    assert torch.equal(loss, want_loss), (loss, want_loss)
    assert grads.keys() == want_grads.keys()
    differ = [n for n in grads if not torch.equal(grads[n], want_grads[n])]
    assert not differ, f"gradients differ from plain Inductor's: {differ}"
    return backend


def _saved(state_dict):
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    buffer.seek(0)
    return torch.load(buffer)


@pytest.mark.parametrize("fresh_marked", [False, True], ids=["into unmarked", "into marked"])
def test_state_dict_of_a_marked_model_saves_and_loads_into_a_fresh_model(fresh_marked):
    torch.manual_seed(0)
    model = TwoBlockNet()
    plain_keys = list(model.state_dict())
    offload_pass.offload_modules(model, "blk")
    assert list(model.state_dict()) == plain_keys, "marks must not show in the state_dict"
    with torch.no_grad():
        model.blk[0].weight.add_(0.5)
    state = _saved(model.state_dict())
    fresh = TwoBlockNet()
    if fresh_marked:
        offload_pass.offload_modules(fresh, "blk")
    result = fresh.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys
    assert all(torch.equal(p, q) for p, q in zip(fresh.parameters(), model.parameters()))
    x = torch.randn(4, 16)
    _assert_equal_to_plain(fresh, x, offloads=2 if fresh_marked else 0)
    assert all(p.grad is None for p in model.parameters()), "gradients landed on the saved model"


def test_to_dtype_and_device_keep_the_marks_and_run_the_converted_weights():
    torch.manual_seed(0)
    model = TwoBlockNet()
    offload_pass.offload_modules(model, "blk")
    assert model.to(torch.float64) is model
    assert {p.dtype for p in model.parameters()} == {torch.float64}
    # The marked forward runs the converted weights (eager, float64 in and out).
    assert model(torch.randn(4, 16, dtype=torch.float64)).dtype == torch.float64
    assert model.to(torch.float32).to("cpu") is model
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    _assert_equal_to_plain(model, torch.randn(4, 16), offloads=2)
    assert offload_pass.clear_marks(model) == ["blk"]


def test_clear_marks_on_a_deep_copy_clears_the_copy_only():
    torch.manual_seed(0)
    model = TwoBlockNet()
    offload_pass.offload_modules(model, "blk")
    twin = copy.deepcopy(model)
    assert offload_pass.clear_marks(twin) == ["blk"]
    assert "forward" not in twin.blk.__dict__ and "forward" in model.blk.__dict__
    with torch.no_grad():
        twin.blk[0].weight.add_(0.5)
    x = torch.randn(4, 16)
    _assert_equal_to_plain(model, x, offloads=2)
    _assert_equal_to_plain(twin, x, offloads=0)
    # Each ran its own weights: the twin's perturbed weight changed its gradient.
    assert not torch.equal(model.blk[0].weight.grad, twin.blk[0].weight.grad)
    assert offload_pass.clear_marks(model) == ["blk"]
    assert offload_pass.clear_marks(twin) == []
