"""What an RNG wrapper node of PyTorch's partitioner runs.

Takes: an fx node. Gives ``rng_wrapped(node)``: for
``run_and_save_rng_state(op, *args)`` (the forward of a random op the
partitioner recomputes), ``run_with_rng_state(state, op, *args)`` (its
recompute) and, on one CUDA device, ``graphsafe_run_with_rng_state(op,
*args, rng_state=...)`` (both), a ``Wrapped`` standing for the op itself
(target, arguments and output value, read as a node is read); None for
every other node. The cost
model prices, and the kernel timer times, a wrapper as the op it runs: the
partitioner wraps fused attention in every recomputed block (even without
dropout), and priced as a wrapper that attention would cost only the bytes
it reads.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.fx as fx

__all__ = ["Wrapped", "rng_wrapped"]


@dataclasses.dataclass(frozen=True)
class Wrapped:
    """The op an RNG wrapper node runs, as ``_flops`` and ``causal_attention``
    read a node: its target, arguments and output value."""

    target: object
    args: tuple
    kwargs: dict
    meta: dict
    name: str  # the wrapper node's


def rng_wrapped(node: fx.Node) -> Optional[Wrapped]:
    """Where ``node`` is one of PyTorch's RNG wrappers, the op it runs
    (``run_and_save_rng_state(op, *args)`` in the forward of a recomputed
    random op, ``run_with_rng_state(state, op, *args)`` in its recompute,
    ``graphsafe_run_with_rng_state(op, *args, rng_state=...)`` for both on
    one CUDA device),
    with that op's output value computed under the graph's fake mode; None
    for every other node. The partitioner wraps the ops it recomputes that
    draw random numbers, fused attention among them (even without dropout):
    priced as a wrapper, the attention of a recomputed block would cost only
    the bytes it reads."""
    from torch._prims import rng_prims

    kwargs = dict(node.kwargs)
    if node.target is rng_prims.run_and_save_rng_state:
        op, args = node.args[0], node.args[1:]
    elif node.target is rng_prims.run_with_rng_state:
        op, args = node.args[1], node.args[2:]
    elif node.target is getattr(rng_prims, "graphsafe_run_with_rng_state", None):
        # One CUDA device (PyTorch's default there): the op with its generator's state as a keyword.
        op, args = node.args[0], node.args[1:]
        kwargs.pop("rng_state", None)
    else:
        return None
    return Wrapped(op, tuple(args), kwargs, {"val": _fake_output(op, args, kwargs)}, node.name)


def _fake_output(op: object, args: tuple, kwargs: dict) -> object:
    """``op``'s output over the fake values of ``args`` (None where one has none or the op fails on them)."""
    from torch._guards import detect_fake_mode

    values = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta.get("val"))
    fake_mode = detect_fake_mode([v for v in torch.utils._pytree.tree_leaves(values) if isinstance(v, torch.Tensor)])
    if fake_mode is None:
        return None
    try:
        with fake_mode:
            return op(*values[0], **values[1])
    except Exception:  # an op the fake mode cannot run: priced by its inputs' bytes
        return None
