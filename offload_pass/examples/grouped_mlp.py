"""Reference fused grouped MLP: the experts block of a mixture-of-experts layer.

Takes: tokens already permuted so that each expert's tokens are contiguous
(like Megatron's GroupedMLP), ``x`` [T, H], the number of tokens of each expert
(E Python ints summing to T), ``w1`` [E, H, F*k] (k=2 for swiglu, 1 for
gelu / relu) and ``w2`` [E, F, H].

Gives two fused custom ops in the ``offload_pass`` namespace, each with a fake
implementation so torch.compile traces them as single nodes:

- ``grouped_mlp_fwd(x, w1, w2, tokens_per_expert, activation)
  -> (out, act_input, fc2_input)``: per expert, ``act_input = x_e @ w1[e]``,
  ``fc2_input = activation(act_input)``, ``out = fc2_input_e @ w2[e]``.
- ``grouped_mlp_bwd(...) -> (grad_x, grad_w1, grad_w2)``: hand-written math.

The forward's autograd saves x (input 0, role ``fc1``), act_input (output 1,
role ``act``) and fc2_input (output 2, role ``fc2``) plus the weights, so a
compiled forward graph returns those getitems of the one fused node as saved
tensors; ``register_saved_roles`` tells the plan which sub-op owns each.

Also: ``GroupedMLP`` (the module), ``grouped_mlp_reference`` (plain
differentiable torch ops, for tests) and ``MoEBlock`` (projection, fixed
round-robin routing, experts, residual).

``tokens_per_expert`` is an ``int[]`` argument, not a tensor: as a tensor the
kernels would need a device->host sync that Dynamo cannot trace without a
graph break, and it would be one more saved tensor. The counts must then be
known on the host; ``MoEBlock`` derives them from static shapes.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch.utils.flop_counter import register_flop_formula
import torch.nn as nn
import torch.nn.functional as F

from offload_pass.marking.roles import register_saved_roles
from offload_pass.planning.workspace import python_op_workspace, register_workspace

__all__ = [
    "ACTIVATIONS",
    "GroupedMLP",
    "MoEBlock",
    "grouped_mlp_bwd",
    "grouped_mlp_fwd",
    "grouped_mlp_reference",
    "round_robin_counts",
]

ACTIVATIONS = ("swiglu", "gelu", "relu")


def _gated(activation: str) -> int:
    return 2 if activation == "swiglu" else 1


def _check(x, w1, w2, tokens_per_expert, activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"grouped_mlp: activation {activation!r} is not one of {ACTIVATIONS}")
    num_experts, hidden, ffn = w2.shape[0], w2.shape[2], w2.shape[1]
    torch._check(
        x.dim() == 2 and x.shape[1] == hidden,
        lambda: f"grouped_mlp: x must be [T, {hidden}], got {tuple(x.shape)}",
    )
    torch._check(
        tuple(w1.shape) == (num_experts, hidden, ffn * _gated(activation)),
        lambda: f"grouped_mlp: w1 {tuple(w1.shape)} does not fit w2 {tuple(w2.shape)} and {activation}",
    )
    torch._check(
        len(tokens_per_expert) == num_experts,
        lambda: f"grouped_mlp: {len(tokens_per_expert)} token counts for {num_experts} experts",
    )
    torch._check(
        sum(tokens_per_expert) == x.shape[0],
        lambda: f"grouped_mlp: token counts sum to {sum(tokens_per_expert)}, x has {x.shape[0]} rows",
    )


def _act(a: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "swiglu":
        gate, up = a.chunk(2, dim=-1)
        return F.silu(gate) * up
    if activation == "gelu":
        return F.gelu(a)
    return F.relu(a)


def _act_backward(grad: torch.Tensor, a: torch.Tensor, activation: str) -> torch.Tensor:
    """d activation(a) / d a, applied to ``grad``; computed in at least fp32 so
    that bf16 loses precision only once, at the final cast. Temporaries are
    reused in place (the same fp32 values as the plain expressions): this
    runs on one expert's tokens inside the backward op, where every extra
    temporary adds to the step's peak."""
    compute = torch.promote_types(a.dtype, torch.float32)
    if activation == "swiglu":
        ffn = grad.shape[-1]
        out = torch.empty_like(a)
        gate = a[..., :ffn].to(compute)
        sig = torch.sigmoid(gate)
        # d_up = g * gate * sig, g = grad in fp32 (the mixed-dtype product
        # computes in fp32, so no fp32 copy of grad is needed)
        tmp = torch.mul(grad, gate)
        tmp.mul_(sig)
        out[..., ffn:].copy_(tmp)
        # d_gate = g * up * sig * (1 + gate * (1 - sig))
        tmp.copy_(a[..., ffn:]).mul_(grad)
        tmp.mul_(sig)
        sig.neg_().add_(1).mul_(gate).add_(1)
        del gate
        tmp.mul_(sig)
        out[..., :ffn].copy_(tmp)
        return out
    g, a32 = grad.to(compute), a.to(compute)
    if activation == "gelu":
        # Exact (erf) GELU, as F.gelu's default: Phi(a) + a * phi(a).
        cdf = 0.5 * (1 + torch.erf(a32 * (1 / math.sqrt(2))))
        pdf = torch.exp(-0.5 * a32 * a32) * (1 / math.sqrt(2 * math.pi))
        out = g * (cdf + a32 * pdf)
    else:
        out = g * (a32 > 0)
    return out.to(a.dtype)


def _grouped_mlp_fwd(x, w1, w2, tokens_per_expert, activation):
    # Each expert's matmul writes into its rows of one output: no per-expert
    # results concatenated afterwards (that would hold every output twice).
    act_input = x.new_empty(x.shape[0], w1.shape[2])
    for e, (xe, ae) in enumerate(zip(x.split(tokens_per_expert), act_input.split(tokens_per_expert))):
        torch.mm(xe, w1[e], out=ae)
    fc2_input = _act(act_input, activation)
    out = x.new_empty(x.shape[0], w2.shape[2])
    for e, (fe, oe) in enumerate(zip(fc2_input.split(tokens_per_expert), out.split(tokens_per_expert))):
        torch.mm(fe, w2[e], out=oe)
    return out, act_input, fc2_input


@torch.library.custom_op("offload_pass::grouped_mlp_fwd", mutates_args=())
def grouped_mlp_fwd(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    tokens_per_expert: list[int],
    activation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check(x, w1, w2, tokens_per_expert, activation)
    return _grouped_mlp_fwd(x, w1, w2, tokens_per_expert, activation)


@grouped_mlp_fwd.register_fake
def _(x, w1, w2, tokens_per_expert, activation):
    _check(x, w1, w2, tokens_per_expert, activation)
    tokens, ffn = x.shape[0], w2.shape[1]
    return (
        x.new_empty(tokens, w2.shape[2]),
        x.new_empty(tokens, w1.shape[2]),
        x.new_empty(tokens, ffn),
    )


def _grouped_mlp_bwd(grad_out, x, act_input, fc2_input, w1, w2, tokens_per_expert, activation):
    grad_x = x.new_empty(x.shape)
    grad_w1, grad_w2 = w1.new_empty(w1.shape), w2.new_empty(w2.shape)
    splits = zip(
        *(t.split(tokens_per_expert) for t in (grad_out, x, act_input, fc2_input, grad_x))
    )
    for e, (go, xe, ae, fe, gx) in enumerate(splits):
        # An expert without tokens still gets a (zero) weight gradient: a
        # matmul over zero rows writes zeros.
        torch.mm(fe.t(), go, out=grad_w2[e])
        grad_act = _act_backward(go @ w2[e].t(), ae, activation)
        torch.mm(xe.t(), grad_act, out=grad_w1[e])
        torch.mm(grad_act, w1[e].t(), out=gx)
        del grad_act
    return grad_x, grad_w1, grad_w2


@torch.library.custom_op("offload_pass::grouped_mlp_bwd", mutates_args=())
def grouped_mlp_bwd(
    grad_out: torch.Tensor,
    # What the forward saved, in ``ctx.saved_tensors`` order:
    x: torch.Tensor, act_input: torch.Tensor, fc2_input: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
    tokens_per_expert: list[int],
    activation: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check(x, w1, w2, tokens_per_expert, activation)
    return _grouped_mlp_bwd(grad_out, x, act_input, fc2_input, w1, w2, tokens_per_expert, activation)


@grouped_mlp_bwd.register_fake
def _(grad_out, x, act_input, fc2_input, w1, w2, tokens_per_expert, activation):
    _check(x, w1, w2, tokens_per_expert, activation)
    return torch.empty_like(x), torch.empty_like(w1), torch.empty_like(w2)


def _grouped_mlp_flops(x_shape, w1_shape, w2_shape) -> int:
    # fc1 (tokens x hidden @ hidden x fc1_out) and fc2 (tokens x ffn @ ffn x hidden).
    tokens, hidden = x_shape
    return 2 * tokens * hidden * w1_shape[2] + 2 * tokens * w2_shape[1] * w2_shape[2]


# FLOP counts for torch.utils.flop_counter (and so for the cost model, which
# would otherwise see the fused MLP as free and prefetch its reloads too late).
@register_flop_formula(torch.ops.offload_pass.grouped_mlp_fwd)
def _fwd_flops(x_shape, w1_shape, w2_shape, *args, out_shape=None, **kwargs) -> int:
    return _grouped_mlp_flops(x_shape, w1_shape, w2_shape)


@register_flop_formula(torch.ops.offload_pass.grouped_mlp_bwd)
def _bwd_flops(grad_shape, x_shape, act_shape, fc2_shape, w1_shape, w2_shape, *args, out_shape=None, **kwargs) -> int:
    # Two matmuls per forward one: the input gradients and the weight gradients.
    return 2 * _grouped_mlp_flops(x_shape, w1_shape, w2_shape)


def _setup_context(ctx, inputs, output):
    x, w1, w2, tokens_per_expert, activation = inputs
    _, act_input, fc2_input = output
    # These are the tensors the offload plan attributes to fc1 / act / fc2;
    # saving exactly them makes the partitioner save the op's input 0 and
    # its getitems 1 and 2.
    ctx.save_for_backward(x, act_input, fc2_input, w1, w2)
    ctx.tokens_per_expert = tokens_per_expert
    ctx.activation = activation
    # act_input / fc2_input are outputs only so that backward can reuse them;
    # no gradient flows through them, which keeps backward one fused op.
    ctx.mark_non_differentiable(act_input, fc2_input)


def _backward(ctx, grad_out, _grad_act, _grad_fc2):
    x, act_input, fc2_input, w1, w2 = ctx.saved_tensors
    grad_x, grad_w1, grad_w2 = grouped_mlp_bwd(
        grad_out, x, act_input, fc2_input, w1, w2, ctx.tokens_per_expert, ctx.activation
    )
    return grad_x, grad_w1, grad_w2, None, None


grouped_mlp_fwd.register_autograd(_backward, setup_context=_setup_context)

# The plan's memory timeline sees each op as one node: tell it what the
# Python implementations hold inside (the backward's per-expert fp32
# activation gradient; measured by running them on meta tensors).
register_workspace(torch.ops.offload_pass.grouped_mlp_fwd.default, python_op_workspace(_grouped_mlp_fwd))
register_workspace(torch.ops.offload_pass.grouped_mlp_bwd.default, python_op_workspace(_grouped_mlp_bwd))

register_saved_roles(grouped_mlp_fwd, inputs={0: "fc1"}, outputs={1: "act", 2: "fc2"})


def _counts(tokens_per_expert: torch.Tensor | Sequence[int]) -> list[int]:
    # A tensor costs a host sync here, and a graph break under torch.compile.
    if isinstance(tokens_per_expert, torch.Tensor):
        return [int(n) for n in tokens_per_expert.tolist()]
    return list(tokens_per_expert)


def grouped_mlp_reference(
    x: torch.Tensor,
    tokens_per_expert: torch.Tensor | Sequence[int],
    w1: torch.Tensor,
    w2: torch.Tensor,
    activation: str = "swiglu",
) -> torch.Tensor:
    """The same math in plain, differentiable torch ops."""
    outs = [
        _act(xe @ w1[e], activation) @ w2[e]
        for e, xe in enumerate(x.split(_counts(tokens_per_expert)))
    ]
    return torch.cat(outs)


def round_robin_counts(tokens: int, num_experts: int) -> list[int]:
    """Tokens per expert when token i goes to expert i % num_experts."""
    # ceil((tokens - e) / num_experts): plain arithmetic, so SymInts need no guard.
    return [(tokens - e + num_experts - 1) // num_experts for e in range(num_experts)]


class _ExpertsModule(nn.Module):
    """A module built from an experts configuration: ``hidden`` and ``ffn``
    sizes, ``num_experts``, the ``activation`` (one of ``ACTIVATIONS``) and
    the parameters' ``dtype`` and ``device``. Subclasses build their layers in
    ``_build``."""

    def __init__(
        self,
        hidden: int,
        ffn: int,
        num_experts: int,
        activation: str = "swiglu",
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self._build(hidden, ffn, num_experts, activation, dtype, device)

    def _build(self, hidden, ffn, num_experts, activation, dtype, device) -> None:
        raise NotImplementedError


class GroupedMLP(_ExpertsModule):
    """Experts of an MoE layer over expert-sorted tokens, one fused op each way.

    ``forward(x, tokens_per_expert)``: ``x`` [T, hidden] sorted by expert;
    ``tokens_per_expert``: E Python ints (a tensor works in eager, at the cost
    of a host sync and, under torch.compile, a graph break). Returns [T, hidden].
    """

    # Sub-op roles of the fused op's saved tensors, for markers' ``roles=``.
    offload_roles = ("fc1", "act", "fc2")

    def _build(self, hidden, ffn, num_experts, activation, dtype, device) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"GroupedMLP: activation {activation!r} is not one of {ACTIVATIONS}")
        self.activation = activation
        factory = {"dtype": dtype, "device": device}
        self.w1 = nn.Parameter(torch.empty(num_experts, hidden, ffn * _gated(activation), **factory))
        self.w2 = nn.Parameter(torch.empty(num_experts, ffn, hidden, **factory))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # 1/sqrt(fan_in) keeps activations O(1) through both matmuls.
        nn.init.normal_(self.w1, std=self.w1.shape[1] ** -0.5)
        nn.init.normal_(self.w2, std=self.w2.shape[1] ** -0.5)

    def forward(self, x: torch.Tensor, tokens_per_expert: torch.Tensor | Sequence[int]) -> torch.Tensor:
        out, _, _ = grouped_mlp_fwd(x, self.w1, self.w2, _counts(tokens_per_expert), self.activation)
        return out


class MoEBlock(_ExpertsModule):
    """``x + unroute(experts(route(proj_in(x))))`` over x [..., hidden].

    Routing is fixed: token i goes to expert i % E. That keeps the token counts
    a function of the static shape (``round_robin_counts``), so the whole block
    traces with ``torch.compile(fullgraph=True)``; a learned router would need
    its counts on the host (a sync and a graph break) before the fused op.
    """

    def _build(self, hidden, ffn, num_experts, activation, dtype, device) -> None:
        self.num_experts = num_experts
        self.proj_in = nn.Linear(hidden, hidden, dtype=dtype, device=device)
        self.experts = GroupedMLP(hidden, ffn, num_experts, activation, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj_in(x).flatten(0, -2)
        tokens = h.shape[0]
        expert = torch.arange(tokens, device=h.device) % self.num_experts
        # Stable, so each expert's tokens keep their order.
        order = torch.argsort(expert, stable=True)
        y = self.experts(h.index_select(0, order), round_robin_counts(tokens, self.num_experts))
        y = torch.empty_like(y).index_copy(0, order, y)
        return x + y.view_as(x)
