"""Rewriting, as Inductor lowers it: a reload is as aligned as the tensor it stands for.

Takes: Inductor's lowering of an ``offload_pass.reload`` node (the op's own
fallback lowering, registered on import). Gives: the reloaded buffer left out
of Inductor's unaligned buffers wherever its fake value is 16-byte aligned,
so the kernels that read it compile as the kernels that read the kept tensor.

Why: Inductor counts a fallback op's output unaligned when any tensor input
is, and every CPU graph input is; the reload's input is the host copy, so
its kernels would lose their alignment hints, their vectorized loads and the
order their reductions sum in, and gradients would drift from plain
Inductor's. The reload allocates its output aligned itself
(``runtime.ops._reload_buffer``), and Inductor asserts the alignment at run
time wherever it assumes it.
"""

from __future__ import annotations

from typing import Any

from torch._inductor import lowering
from torch._inductor.utils import tensor_is_aligned
from torch._inductor.virtualized import V

from offload_pass.runtime import OPS

__all__ = ["reload_lowering"]

lowering.make_fallback(OPS["reload"], warn=False)
_fallback = lowering.lowerings[OPS["reload"]]


def reload_lowering(*args: Any, **kwargs: Any) -> Any:
    """The fallback's lowering, then the output's alignment from its fake value."""
    out = _fallback(*args, **kwargs)
    node = V.graph.current_node
    fake = node.meta.get("val") if node is not None else None
    if fake is not None and tensor_is_aligned(fake):
        V.graph.unaligned_buffers.discard(out.get_name())
    return out


# Still a fallback to Inductor (out-of-process compiles list the lowerings
# that are: torch/_inductor/compile_fx_ext.py).
reload_lowering._is_fallback_handler = True  # type: ignore[attr-defined]
lowering.lowerings[OPS["reload"]] = reload_lowering
