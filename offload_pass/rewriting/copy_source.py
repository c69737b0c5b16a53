"""Stage 4, rewriting, as Inductor lowers it: ``offload`` copies the buffer the graph keeps.

Takes: Inductor's lowering of an ``offload_pass.offload`` node (the op's own
fallback lowering with a layout constraint, registered on import). Gives: the
op's input realized as the one buffer the tensor's other users read (the
consumers in the forward, the ``release``), in the layout Inductor fixed for
it where that is dense (a convolution's output laid out channels last), else
with the strides of its fake value; the host copy, a graph output, has the
layout of what ``offload`` read.

Why: with PyTorch's ``needs_exact_strides`` tag (this package's first way),
Inductor met the exact strides on a value it had not realized yet by a copy
of its own: the fused kernel stored the value twice, ``offload`` read the
copy and the graph freed that copy as soon as the op returned, while the
asynchronous copy still read it (the test decoder's gelu outputs on the
H200: gradients 11 % off now and then, until the runtime held the source,
``runtime.ops``'s ``copy_sources``). Realized first, the value is one buffer:
no second store, no second copy of the tensor alive until the release (the
memory timeline counts one), and the release's wait guards the buffer the
copy reads. Where a copy is still needed (a view no strides can express, an
expanded tensor), Inductor makes it, and the runtime holds it until its copy
landed.

A dense layout other than the traced one is copied as it is, where the host
copy stands for its source alone (the rewrite says so, ``LAYOUT_FREE_KEY``: a
copy the backward rebuilds views from by their traced strides must hold the
traced layout, or the views read other elements): Inductor's
layout optimization (on whenever a graph has a convolution on the CPU, on
convolution-heavy graphs on the GPU) fixes convolution outputs channels last,
and holding them to their traced strides cost a device copy of each before
its offload (ResNet-18 on the H200: 9 of its 16 copies). The host copy's fake
value takes that layout, since Inductor lays a graph output out as its fake
value, and AOTAutograd compiles the backward for the strides the forward's
outputs have, so the reload comes back in it too, as the kept tensor would.

And the host copy keeps the strides ``offload`` gave it: Inductor lays a 4-D
output among the nodes its layout optimization prefers channels last for (the
nodes that feed a convolution, and those that follow one up to the graph's
last convolution, their users included) out channels last, by a copy of its
own. For the host copy that copy was a CPU kernel reading the page-locked
buffer before the device->host copy landed, and the release was handed the
copy (it refuses one: the runtime check in ``runtime.ops``). So the node is
taken out of that set as it is lowered (Hugging Face Mamba, whose scan saves
4-D tensors between its layers' conv1d; any network with two convolutions on
the CPU). ``release``, ``reload`` and ``wait_reload`` take their tensors in
the layout they have for the same reason (their ``flexible_layout`` tag).
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
