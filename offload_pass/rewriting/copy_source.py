"""Rewriting, as Inductor lowers it: ``offload`` copies the buffer the graph keeps.

Takes: Inductor's lowering of an ``offload_pass.offload`` node (registered on
import). Gives: the op's input realized as the one buffer its other users
read, in the layout Inductor fixed for it where that is dense, else with its
fake value's strides; the host copy has the layout of what ``offload`` read.

Why: met by a copy of Inductor's own, exact strides let the graph free that
copy while the asynchronous copy still read it; realized first, the value is
one buffer that the release's wait guards. A dense layout other than the
traced one (convolution outputs channels last) is copied as it is where the
host copy stands for its source alone (``LAYOUT_FREE_KEY``), saving a device
copy per offload. The host copy keeps its strides, or Inductor's layout
optimization would copy it on the CPU while its device->host copy lands;
``release``, ``reload`` and ``wait_reload`` take their layouts as they come
(``flexible_layout``) for the same reason.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch._inductor import ir
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._inductor.lowering import make_fallback
from torch._inductor.virtualized import V

from offload_pass.meta_keys import LAYOUT_FREE_KEY
from offload_pass.runtime import OPS

__all__ = ["offload_input_layout"]


def offload_input_layout(node: fx.Node, x: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Inductor's layout constraint of ``offload``: ``x`` realized, then kept
    in the dense layout Inductor fixed for it where the rewrite said the host
    copy stands for ``x`` alone (``LAYOUT_FREE_KEY``; the backward rebuilds
    views of the others by their traced strides), or else held to the strides
    of the node's fake input (a copy only where the realized buffer cannot
    have them). The node's own output keeps the strides of its fake value, updated
    to the layout kept: it leaves the nodes Inductor would lay out channels
    last."""
    prefer_channels_last = getattr(V.graph, "nodes_prefer_channels_last", None)
    if prefer_channels_last is not None:
        prefer_channels_last.discard(node)
    source = node.args[0] if node.args else None
    fake = source.meta.get("val") if isinstance(source, fx.Node) else None
    if isinstance(x, ir.TensorBox) and isinstance(fake, torch.Tensor):
        x.realize()
        stride = _dense_permutation_of(x, fake) if node.meta.get(LAYOUT_FREE_KEY) else None
        if stride is None:
            x = ir.ExternKernel.require_exact_strides(x, fake.stride())
        else:
            # The host copy, a graph output Inductor lays out as its fake
            # value, takes the layout too.
            host = node.meta.get("val")
            if isinstance(host, torch.Tensor):
                with V.fake_mode:
                    node.meta["val"] = torch.empty_strided(
                        host.size(), stride, dtype=host.dtype, device=host.device
                    )
    return (x, *args), kwargs


def _dense_permutation_of(x: ir.TensorBox, fake: torch.Tensor) -> list[int] | None:
    """The strides of ``x`` where it is a whole buffer Inductor has fixed in
    a dense layout other than the fake value's dense one (a convolution's
    output laid out channels last), else None. Copied as it is, the host
    copy takes that layout and the backward is compiled for it (AOTAutograd
    gives the backward's inputs the strides of the forward's outputs), so no
    device copy to the traced strides is made for ``offload`` to read."""
    data = x.data
    if not isinstance(data, ir.StorageBox) or not isinstance(data.data, ir.Buffer):
        return None
    layout = data.data.get_layout()
    if not isinstance(layout, ir.FixedLayout):
        return None
    try:
        size = [int(s) for s in layout.size]
        stride = [int(s) for s in layout.stride]
        offset = int(layout.offset)
    except TypeError:  # symbolic sizes: the traced strides, as before
        return None
    traced = list(fake.stride())
    if not all(isinstance(n, int) for n in (*fake.size(), *traced)):
        return None
    if offset != 0 or size != list(fake.size()) or stride == traced:
        return None
    laid_out = torch.empty_strided(size, stride, dtype=fake.dtype, device="meta")
    if not (is_non_overlapping_and_dense_or_false(laid_out) and is_non_overlapping_and_dense_or_false(fake)):
        return None
    return stride


# Registered as the op's own fallback lowering, not as a bare layout
# constraint: an op without a lowering gets Inductor's implicit fallback at
# its first lowering, and on torch 2.13 that registers the default constraint
# over any added before (the CPU tests saw a copy of the input handed to
# ``offload``). With a lowering of its own, the implicit one never runs.
make_fallback(OPS["offload"], layout_constraint=offload_input_layout, warn=False)
