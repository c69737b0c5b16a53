"""Tensor subclasses holding several buffers: offloaded buffer by buffer.

AOTAutograd flattens traceable wrapper subclasses into their inner tensors
before partitioning, so the pass sees (and plans) the buffers one by one, and
AOTAutograd's runtime rebuilds any wrapper that crosses the graph boundary
from whatever buffers it gets, moved or not. Here a quantized-style tensor's
data and scale are consumed by a custom op that saves both for backward.
"""

import pytest
import torch
import torch.nn as nn
from torch.utils._pytree import tree_map_only

import offload_pass

from helpers import assert_same_training


class ScaledTensor(torch.Tensor):
    """A quantized-style tensor: ``data * scale`` with one scale per row."""

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=data.dtype, device=data.device)

    def __init__(self, data, scale):
        self._data = data
        self._scale = scale

    def __tensor_flatten__(self):
        return ["_data", "_scale"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return ScaledTensor(inner["_data"], inner["_scale"])

    def __repr__(self):
        return f"ScaledTensor({self._data.shape})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        plain = tree_map_only(ScaledTensor, lambda t: t._data * t._scale, (args, kwargs or {}))
        return func(*plain[0], **plain[1])

    @staticmethod
    def quantize(x):
        return ScaledTensor(*quantize(x))


@torch.library.custom_op("offload_pass_test::quantize", mutates_args=())
def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An opaque kernel, so the partitioner saves its outputs rather than recomputing them."""
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-6) / 127.0
    return x / scale, scale


@quantize.register_fake
def _(x):
    return torch.empty_like(x), x.new_empty(x.shape[:-1] + (1,))


def _quantize_backward(ctx, grad_data, grad_scale):
    (scale,) = ctx.saved_tensors
    return grad_data / scale  # the scale is treated as a constant (straight-through)


quantize.register_autograd(
    _quantize_backward, setup_context=lambda ctx, inputs, output: ctx.save_for_backward(output[1])
)


@torch.library.custom_op("offload_pass_test::scaled_linear", mutates_args=())
def scaled_linear(data: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(data * scale) @ weight.T: consumes a ScaledTensor's buffers."""
    return (data * scale) @ weight.t()


@scaled_linear.register_fake
def _(data, scale, weight):
    return data.new_empty(data.shape[:-1] + (weight.shape[0],))


@torch.library.custom_op("offload_pass_test::scaled_linear_backward", mutates_args=())
def scaled_linear_backward(
    grad: torch.Tensor, data: torch.Tensor, scale: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = grad @ weight
    return g * scale, (g * data).sum(-1, keepdim=True), grad.t() @ (data * scale)


@scaled_linear_backward.register_fake
def _(grad, data, scale, weight):
    return torch.empty_like(data), torch.empty_like(scale), torch.empty_like(weight)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)  # the buffers, not a dequantized copy


def _backward(ctx, grad):
    return scaled_linear_backward(grad, *ctx.saved_tensors)


scaled_linear.register_autograd(_backward, setup_context=_setup)


class QuantBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 64)
        self.proj = nn.Parameter(torch.randn(16, 64) / 8)

    def forward(self, x):
        q = ScaledTensor.quantize(torch.tanh(self.fc(x)))
        return scaled_linear(q._data, q._scale, self.proj)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = QuantBlock()

    def forward(self, x):
        return self.block(x).pow(2).mean()


def buffer_decisions(plan):
    """Decisions of the two buffers of the ScaledTensor saved by scaled_linear."""
    data = plan.entry("getitem")
    scale = plan.entry("getitem_1")
    assert (data.op, data.shape, scale.op, scale.shape) == (
        "offload_pass_test.quantize[0]", (64, 64), "offload_pass_test.quantize[1]", (64, 1)
    ), plan
    return data.decision, scale.decision


@pytest.mark.parametrize(
    "case, config, mark, want",
    [
        ("all buffers", {"min_bytes": 0}, "offload", ("offload", "offload")),
        ("some buffers", {"min_bytes": 1024}, "offload", ("offload", "keep")),
        ("no buffers", {"min_bytes": 0}, "keep", ("keep", "keep")),
    ],
)
def test_subclass_buffers(case, config, mark, want):
    x = torch.randn(64, 32)

    def marks(m):
        offload_pass.offload_modules(m, "block")
        if mark == "keep":
            offload_pass.keep_modules(m, "block")

    plan = assert_same_training(Net(), marks, (x,), **config).plans[-1]
    assert buffer_decisions(plan) == want, plan
