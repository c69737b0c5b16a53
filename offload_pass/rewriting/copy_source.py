"""Stage 4, rewriting, as Inductor lowers it: ``offload`` copies the buffer the graph keeps.

Takes: Inductor's lowering of an ``offload_pass.offload`` node (the op's own
fallback lowering with a layout constraint, registered on import). Gives: the op's input realized as the one
buffer the tensor's other users read (the consumers in the forward, the
``release``), laid out with the strides of its fake value, so that the host
copy is the graph's own output as it is.

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

And the host copy, a graph output, keeps the strides ``offload`` gave it:
Inductor lays a 4-D output among the nodes its layout optimization prefers
channels last for (the nodes that feed a convolution, and those that follow
one up to the graph's last convolution, their users included) out channels
last, by a copy of its own. For the host copy that copy was a CPU kernel
reading the page-locked buffer before the device->host copy landed, and the
release was handed the copy (it refuses one: the runtime check in
``runtime.ops``). So the node is taken out of that set as it is lowered
(Hugging Face Mamba, whose scan saves 4-D tensors between its layers'
conv1d; any network with two convolutions on the CPU).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
from torch._inductor import ir
from torch._inductor.lowering import make_fallback
from torch._inductor.virtualized import V

from offload_pass.runtime import OPS

__all__ = ["offload_input_layout"]


def offload_input_layout(node: fx.Node, x: Any, *args: Any, **kwargs: Any) -> tuple[tuple, dict]:
    """Inductor's layout constraint of ``offload``: ``x`` realized, then held
    to the strides of the node's fake input (a copy only where the realized
    buffer cannot have them). The node's own output keeps the strides of its
    fake value: it leaves the nodes Inductor would lay out channels last."""
    prefer_channels_last = getattr(V.graph, "nodes_prefer_channels_last", None)
    if prefer_channels_last is not None:
        prefer_channels_last.discard(node)
    source = node.args[0] if node.args else None
    fake = source.meta.get("val") if isinstance(source, fx.Node) else None
    if isinstance(x, ir.TensorBox) and isinstance(fake, torch.Tensor):
        x.realize()
        x = ir.ExternKernel.require_exact_strides(x, fake.stride())
    return (x, *args), kwargs


# Registered as the op's own fallback lowering, not as a bare layout
# constraint: an op without a lowering gets Inductor's implicit fallback at
# its first lowering, and on torch 2.13 that registers the default constraint
# over any added before (the CPU tests saw a copy of the input handed to
# ``offload``). With a lowering of its own, the implicit one never runs.
make_fallback(OPS["offload"], layout_constraint=offload_input_layout, warn=False)
