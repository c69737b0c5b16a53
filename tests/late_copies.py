"""Copies that land as late as a GPU's events allow, on the CPU.

On the CPU the runtime copies synchronously, so no read can come before its
copy and a missing wait goes unseen. ``late_copies()`` makes each copy land
at the last moment the runtime's ordering promises it:

- a copy-out's host buffer holds NaN from ``offload`` until its ``release``
  (or, where no release ran, the reload that reads it); then it is copied
  from the source tensor as that tensor is at that moment, so a source the
  compiled code overwrote between the two is caught too;
- a reloaded tensor holds NaN from ``reload`` until its ``wait_reload``,
  then it is copied from its host buffer as that buffer is then.

A kernel that reads a reload before its wait, or a host buffer before its
copy-out is ordered, reads NaN: the gradients say so. Floating tensors
only (integers stay exact). Yields the counts of copies made late.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch._subclasses.fake_tensor import is_fake

from offload_pass.runtime import ops
from offload_pass.runtime.ops import extent_bytes
from offload_pass.runtime.state import STATE


def _poison(t: torch.Tensor) -> bool:
    """NaN over ``t``'s extent (an expanded layout's elements share memory: filled as one flat block)."""
    if not t.is_floating_point() or t.numel() == 0:
        return False
    elements = extent_bytes(t) // t.element_size()
    t.as_strided((elements,), (1,), t.storage_offset()).fill_(float("nan"))
    return True


@contextlib.contextmanager
def late_copies() -> Iterator[dict]:
    counts = {"copy_outs": 0, "reloads": 0, "unwaited_reloads": 0}
    pending_out: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # host address: (host, source)
    pending_in: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # reload address: (reloaded, host)
    copy_out, reload_buffer, copy_layout, waits = (
        ops._copy_out, ops._reload_buffer, ops._copy_layout, ops._compute_stream_waits
    )

    def land_copy_out(address: int) -> None:
        if address in pending_out:
            host, source = pending_out.pop(address)
            copy_layout(host, source)

    def late_copy_out(x, *settings):
        before = STATE.stats["offload_calls"]
        host = copy_out(x, *settings)
        if STATE.stats["offload_calls"] > before and host.device.type == "cpu" and _poison(host):
            pending_out[host.data_ptr()] = (host, x)
            counts["copy_outs"] += 1
        return host

    def late_reload_buffer(host, device, align):
        if is_fake(host):  # the op's fake implementation: shapes only
            return reload_buffer(host, device, align)
        land_copy_out(host.data_ptr())  # no release ran: the reload waits for the copy-out
        out = reload_buffer(host, device, align)
        if out.is_floating_point() and out.numel():
            pending_in[out.data_ptr()] = (out, host)
        return out

    def late_copy_layout(dst, src, non_blocking=False):
        if pending_in.get(dst.data_ptr(), (None,))[0] is dst:
            _poison(dst)  # lands at its wait_reload
            counts["reloads"] += 1
            return
        copy_layout(dst, src, non_blocking)

    def late_waits(x, events, key):
        if events is STATE.copy_out_events:
            land_copy_out(key)
        elif events is STATE.reload_events and key in pending_in:
            out, host = pending_in.pop(key)
            copy_layout(out, host)
        return waits(x, events, key)

    ops._copy_out, ops._reload_buffer, ops._copy_layout, ops._compute_stream_waits = (
        late_copy_out, late_reload_buffer, late_copy_layout, late_waits
    )
    try:
        yield counts
    finally:
        ops._copy_out, ops._reload_buffer, ops._copy_layout, ops._compute_stream_waits = (
            copy_out, reload_buffer, copy_layout, waits
        )
        counts["unwaited_reloads"] = len(pending_in)
