"""Tracing a model on the meta device as it would trace on a GPU.

Takes: a model and its inputs, every tensor of them on the meta device (or
inputs on the CPU, moved to meta), and the Dynamo graphs of their compile.
Gives what lets Inductor's AOTAutograd pipeline trace and partition those
graphs without a byte of data and without compiling a kernel:

- ``check_meta_model(model)`` / ``to_meta(value)``: the model's parameters
  and buffers must be on meta (a clear error naming the first that is not);
  input tensors are moved there (shapes, dtypes and strides kept).
- ``route_attention(gm)``: SDPA on meta tensors decomposes to its math path
  (the s x s score matrix saved and priced as if materialised); each SDPA
  call of the Dynamo graph is routed to the fused CPU kernel instead, which
  saves what a GPU's fused kernels save (query, key, value, output and the
  row log-sum-exp) and whose meta kernels, forward and backward, take
  grouped-query key/value heads as they are.
- ``stub_compile``: Inductor's inner compile replaced: a graph is never
  compiled, calling it gives meta tensors of its outputs' shapes.
- ``meta_tracing()``, a context for the compile: Inductor's joint-graph
  constant folding off (it evaluates the graph on real data, and on meta
  tensors leaves a use of a node ahead of its definition); and the autograd
  of every op that decomposes (``CompositeImplicitAutograd``) but has a meta
  kernel in Python (``nll_loss``, ``_fused_rms_norm``, ``dropout``, ...)
  taken from its decomposition, as on a real device. Under AOTAutograd's
  Python dispatcher such an op's meta kernel hides its decomposition from
  the autograd key, so it traces with no backward: a loss whose gradient
  never reaches the logits.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F

__all__ = ["check_meta_model", "meta_tracing", "route_attention", "stub_compile", "to_meta"]

_SDPA = (F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


def check_meta_model(model: torch.nn.Module) -> None:
    """ValueError naming the first parameter or buffer of ``model`` not on the meta device."""
    for kind, items in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, tensor in items:
            if tensor.device.type != "meta":
                raise ValueError(
                    f"plan_offline: {kind} {name!r} is on {tensor.device}, not the meta device; build the model "
                    "there (`with torch.device('meta'): model = ...`) or move it (`model.to('meta')`), so that "
                    "no weight is allocated"
                )


def to_meta(value: Any) -> Any:
    """``value`` with every tensor in it (nested in tuples, lists, dicts) on the meta device."""
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            return value
        moved = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        return moved.requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: to_meta(v) for k, v in value.items()}
    return value


def _fused_cpu_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
    dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None, enable_gqa: bool = False,
) -> torch.Tensor:
    """SDPA as the fused CPU kernel (``enable_gqa``: its meta kernel takes
    fewer key/value heads as they are); a boolean mask made additive first,
    as SDPA does before a fused kernel."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        blocked = torch.scalar_tensor(float("-inf"), dtype=query.dtype, device=attn_mask.device)
        attn_mask = torch.where(attn_mask, 0.0, blocked)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
    )[0]


def route_attention(gm: fx.GraphModule) -> int:
    """Route every SDPA call of the Dynamo graph ``gm`` to the fused CPU
    kernel (``_fused_cpu_attention``); returns how many."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _SDPA:
            node.target = _fused_cpu_attention
            count += 1
    if count:
        gm.recompile()
    return count


def _meta_like(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def stub_compile(gm: fx.GraphModule, example_inputs: Sequence[object], **kwargs: Any):
    """Inductor's inner compile, not compiling: a boxed function returning
    meta tensors of the graph's output shapes (None where an output has no
    traced value)."""
    (outputs,) = [n.args[0] for n in gm.graph.find_nodes(op="output")]
    values = [o.meta.get("val") if isinstance(o, fx.Node) else o for o in outputs]

    def run(args: list) -> list:
        args.clear()
        return [_meta_like(v) for v in values]

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _hidden_decompositions() -> list:
    """The aten overloads that decompose but carry a Python meta kernel and no autograd kernel for meta."""
    from torch._C import DispatchKey

    found = []
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if (
                DispatchKey.Meta in op.py_kernels and DispatchKey.AutogradMeta not in op.py_kernels
                and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
            ):
                found.append(op)
    return found


def _decomposed(op: torch._ops.OpOverload):
    def run(*args: Any, **kwargs: Any) -> Any:
        return op.decompose(*args, **kwargs)

    return run


@contextlib.contextmanager
def meta_tracing() -> Iterator[None]:
    """Inductor's joint-graph passes without its uniform-value constant
    folding, and the hidden decompositions' autograd on meta, while open."""
    from torch._C import DispatchKey
    from torch._inductor.fx_passes import joint_graph

    folding = joint_graph.constant_fold_uniform_value
    joint_graph.constant_fold_uniform_value = lambda gm: None
    ops = _hidden_decompositions()
    for op in ops:
        op.py_impl(DispatchKey.AutogradMeta)(_decomposed(op))
    try:
        yield
    finally:
        joint_graph.constant_fold_uniform_value = folding
        for op in ops:
            op.py_kernels.pop(DispatchKey.AutogradMeta, None)
            op._dispatch_cache.clear()
