"""Scratch memory an op holds while it runs, beyond its outputs.

Takes: registrations ``register_workspace(op, bytes_of)`` (public: a user
with a fused op tells the simulation what it cannot see inside), and FX
nodes. Gives: ``workspace_bytes(node)``, read by the memory timeline. The
attention backward kernels are registered here; ``python_op_workspace``
measures an op implemented in Python by running it on meta tensors.
"""

from __future__ import annotations

import logging
import weakref
from typing import Callable

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from offload_pass.registry import REGISTRY
from offload_pass.units import hint

__all__ = ["python_op_workspace", "register_workspace", "workspace_bytes"]

log = logging.getLogger(__name__)


# Scratch memory an op allocates and frees inside itself, by op: a function
# of the node giving bytes, kept in ``REGISTRY.workspaces``. The simulation
# cannot see inside an op, and such scratch can make the step's peak (an
# attention backward's fp32 accumulators, a grouped MLP backward's fp32
# activation gradient).


def register_workspace(op: object, bytes_of: Callable[[fx.Node], int]) -> None:
    """Tell the simulation how much scratch memory ``op`` (an OpOverload or
    its packet) holds while it runs: ``bytes_of(node)`` from the node's
    arguments' fake tensors. Outputs are counted already; only the memory
    the op frees before returning belongs here."""
    REGISTRY.workspaces[op] = bytes_of


def workspace_bytes(node: fx.Node, count_cpu: bool) -> int:
    """Scratch bytes ``node`` holds while it runs (0 for host-only nodes unless ``count_cpu``)."""
    if node.op != "call_function":
        return 0
    fn = REGISTRY.workspaces.get(node.target) or REGISTRY.workspaces.get(getattr(node.target, "overloadpacket", None))
    if fn is None:
        return 0
    devices = {t.device.type for t in tree_leaves(node.meta.get("val")) if isinstance(t, torch.Tensor)}
    if devices and devices <= {"cpu"} and not count_cpu:
        return 0
    try:
        return int(fn(node))
    except Exception as error:  # an estimate must never stop a compile
        log.debug("offload_pass: no workspace estimate for %s: %s", node.name, error)
        return 0


def _attention_backward_workspace(node: fx.Node) -> int:
    # Flash-style backward kernels (cuDNN, FlashAttention-2) accumulate dq in
    # fp32 and keep one fp32 row statistic per query.
    q = node.args[1].meta.get("val") if isinstance(node.args[1], fx.Node) else None
    if not isinstance(q, torch.Tensor) or q.device.type != "cuda":
        return 0
    numel = hint(q.numel())
    return 4 * numel + 4 * (numel // max(hint(q.shape[-1]), 1))


for _name in (
    "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_flash_attention_backward",
    "_efficient_attention_backward",
):
    if hasattr(torch.ops.aten, _name):
        register_workspace(getattr(torch.ops.aten, _name), _attention_backward_workspace)


class _StoragePeak(TorchDispatchMode):
    """Bytes of the storages that ops create while the mode is on, alive at
    once at most (Python drops a tensor when its last reference goes, as it
    does on the GPU)."""

    def __init__(self, existing: set[int]) -> None:
        super().__init__()
        self.existing = existing
        self.live: dict[int, list[int]] = {}
        self.total = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.existing:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [storage.nbytes(), 0]
            self.total += entry[0]
            self.peak = max(self.peak, self.total)
        entry[1] += 1
        weakref.finalize(t, self._drop, key)

    def _drop(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self.live[key]
            self.total -= entry[0]


def python_op_workspace(impl: Callable[..., object]) -> Callable[[fx.Node], int]:
    """A ``register_workspace`` function for an op implemented in Python by
    ``impl`` (same arguments as the op): runs ``impl`` on meta tensors of the
    node's shapes and returns the most memory it held beyond its outputs."""

    def bytes_of(node: fx.Node) -> int:
        def meta(a: object) -> object:
            if isinstance(a, fx.Node):
                val = a.meta.get("val")
                if isinstance(val, torch.Tensor):
                    return torch.empty_strided(
                        [hint(d) for d in val.shape], [hint(d) for d in val.stride()],
                        dtype=val.dtype, device="meta",
                    )
                return hint(val)
            if isinstance(a, (list, tuple)):
                return type(a)(meta(x) for x in a)
            return a

        args = [meta(a) for a in node.args]
        kwargs = {k: meta(v) for k, v in node.kwargs.items()}
        existing = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        mode = _StoragePeak(existing)
        with mode:
            out = impl(*args, **kwargs)
        outputs = sum(t.untyped_storage().nbytes() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return max(mode.peak - outputs, 0)

    return bytes_of
