"""The share of a fused attention kernel's work that its causal mask leaves.

Takes: an fx node (its ``meta["val"]`` fake tensors, as the cost model reads
them). Gives: ``causal_share(node)``, a ``Fraction`` in [0, 1]: the share of
the (query, key) pairs the kernel computes, which the cost model multiplies
into the op's FLOPs (full attention's count); ``argument(node, name)``, an
argument read by its name in the op's schema; ``is_nested(node)``.

Why: the flash, memory-efficient, cuDNN and CPU fused kernels skip the
blocks above a causal mask's diagonal, in the forward and in the backward,
so causal attention does about half the matmul work of full attention. Every
matmul of these kernels (Q K^T and P V forward; the scores, dP, dV, dQ and dK
backward) spans the same (query, key) pairs, so one share scales them all.

The rule, for ``L`` queries and ``S`` keys, where query ``i`` sees keys
``j <= i + offset``: the pairs computed are ``sum(clamp(i + 1 + offset, 0, S)
for i < L)`` out of ``L * S``. ``offset`` is 0 for a top-left aligned mask
(``is_causal`` of ``scaled_dot_product_attention``, ``torch.tril(ones(L, S))``;
a single query sees one key) and ``S - L`` for a bottom-right aligned one
(``torch.nn.attention.bias.causal_lower_right``; a single query sees all).
For ``L == S`` both give ``(S + 1) / (2 S)``.

Full price (a share of 1) where the op is not causal, where it has an
explicit mask or bias (a given mask is not known to be causal), for nested
(jagged) inputs (the lengths of their sequences are not known when planning)
and where a length has no hint.
"""

from __future__ import annotations

import enum
from fractions import Fraction
from typing import Optional

import torch
import torch.fx as fx

from offload_pass.units import size_hint

__all__ = ["Align", "argument", "causal_pairs", "causal_share", "is_nested"]


class Align(enum.Enum):
    TOP_LEFT = "top-left"  # query i sees keys j <= i
    BOTTOM_RIGHT = "bottom-right"  # query i sees keys j <= i + S - L
    MASK_TYPE = "custom_mask_type"  # the op's argument says: 0 none, 1 top-left, 2 bottom-right


_aten = torch.ops.aten
# Per op: how its causal flag aligns the diagonal, and whether its query and
# key are laid out (batch, heads, seq, dim) (``True``, the SDPA ops) or
# (batch, seq, heads, dim) (the kernels under them).
#
# ``_scaled_dot_product_flash_attention`` hands ``is_causal`` to the
# FlashAttention-2 kernel, whose causal mask is bottom-right aligned; SDPA
# sends it causal work only where L == S, where both alignments agree, and
# ``causal_lower_right`` sends it non-square work meaning bottom-right. The
# memory-efficient, cuDNN and CPU ops implement SDPA's top-left mask.
_OPS = {
    getattr(_aten, name): rule
    for names, rule in (
        (("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward"),
         (Align.BOTTOM_RIGHT, True)),
        (("_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
          "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
          "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"),
         (Align.TOP_LEFT, True)),
        (("_flash_attention_forward", "_flash_attention_backward"), (Align.BOTTOM_RIGHT, False)),
        (("_efficient_attention_forward", "_efficient_attention_backward"), (Align.MASK_TYPE, False)),
    )
    for name in names
    if hasattr(_aten, name)
}
_CUSTOM_MASK_TYPES = {0: None, 1: Align.TOP_LEFT, 2: Align.BOTTOM_RIGHT}
# Arguments that carry an explicit mask or bias, or nested sequences' offsets.
_MASKS = ("attn_mask", "attn_bias", "bias")
_NESTED = ("cum_seq_q", "cu_seqlens_q")


def argument(node: fx.Node, name: str) -> object:
    """The argument ``name`` of ``node`` by its op's schema (given
    positionally, by keyword, or its default; None where the op has no such
    argument), fx nodes replaced by their ``meta["val"]``."""
    for index, schema_arg in enumerate(node.target._schema.arguments):
        if schema_arg.name != name:
            continue
        if name in node.kwargs:
            value = node.kwargs[name]
        elif not schema_arg.kwarg_only and index < len(node.args):
            value = node.args[index]
        else:
            value = schema_arg.default_value if schema_arg.has_default_value() else None
        return value.meta.get("val") if isinstance(value, fx.Node) else value
    return None


def is_nested(node: fx.Node) -> bool:
    """Whether ``node``'s attention runs over nested (jagged) sequences
    (it is given their offsets)."""
    return any(argument(node, name) is not None for name in _NESTED)


def _alignment(node: fx.Node, align: Align) -> Optional[Align]:
    """How ``node``'s causal mask is aligned; None where it computes every pair."""
    if align is Align.MASK_TYPE:
        return _CUSTOM_MASK_TYPES.get(argument(node, "custom_mask_type"))
    return align if argument(node, "is_causal") is True else None


def causal_pairs(queries: int, keys: int, align: Align) -> int:
    """The (query, key) pairs a causal mask of ``align`` keeps out of
    ``queries * keys``."""

    def up_to(n: int) -> int:  # sum(clamp(k, 0, keys) for k in 1..n)
        if n <= 0:
            return 0
        if n <= keys:
            return n * (n + 1) // 2
        return keys * (keys + 1) // 2 + (n - keys) * keys

    offset = 0 if align is Align.TOP_LEFT else keys - queries
    return up_to(queries + offset) - up_to(offset)


def causal_share(node: fx.Node) -> Fraction:
    """The share of full attention's pairs ``node`` computes (1 for ops
    other than the fused attention kernels, and see the module's rules)."""
    rule = _OPS.get(getattr(node.target, "overloadpacket", None))
    if rule is None or not hasattr(node.target, "_schema"):
        return Fraction(1)
    align, heads_first = rule
    align = _alignment(node, align)
    # A given mask or bias is not known to be causal: full price.
    if align is None or is_nested(node) or any(argument(node, name) is not None for name in _MASKS):
        return Fraction(1)
    query, key = argument(node, "query"), argument(node, "key")
    if not (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and query.dim() == key.dim() == 4):
        return Fraction(1)
    dim = 2 if heads_first else 1
    queries, keys = size_hint(query.shape[dim]), size_hint(key.shape[dim])
    if not (isinstance(queries, int) and isinstance(keys, int)) or queries <= 0 or keys <= 0:
        return Fraction(1)
    return Fraction(causal_pairs(queries, keys, align), queries * keys)
