"""Runtime ops that the rewritten graphs call.

Takes: tensors from the compiled forward / backward graphs. Gives four
``torch.library`` custom ops in the ``offload_pass`` namespace, each with a fake
implementation so Inductor can trace and schedule them:

- ``offload(x) -> host``: device->host copy of ``x`` on the device->host stream,
  into pinned memory; records a completion event.
- ``release(x!, host)``: the compute stream waits for that event. It is the last
  use of ``x`` in the forward graph, so the graph frees ``x`` right after it, and
  the wait makes that reuse safe without ``record_stream``. Declared as mutating
  ``x`` so that nothing can be reordered between the copy and the release.
- ``reload(host) -> x``: host->device copy on the host->device stream into memory
  allocated on the compute stream (after the copy-out of ``host`` completed).
- ``wait_reload(x!)``: the compute stream waits for the reload; placed right
  before the first consumer, which reads ``x`` after this "mutation" and so can
  never be scheduled before it.

On CPU tensors the same ops run synchronously into separate buffers, so CPU
tests execute the real rewritten graphs.
"""

from __future__ import annotations

import torch

__all__ = ["stats", "reset_stats", "streams_for"]

# Completion events keyed by the data pointer of the tensor they guard. A key is
# unique while its tensor is alive, and every tensor stays alive until its event
# is consumed (the graph holds it), so pointer reuse cannot alias two events.
_copy_out_events: dict[int, torch.cuda.Event] = {}
_reload_events: dict[int, torch.cuda.Event] = {}
_streams: dict[int, tuple[torch.cuda.Stream, torch.cuda.Stream]] = {}
_pin_memory = True

# Counters for tests and reports: copies and bytes in each direction.
_stats = {"offload_calls": 0, "offload_bytes": 0, "reload_calls": 0, "reload_bytes": 0}


def stats() -> dict[str, int]:
    return dict(_stats)


def reset_stats() -> None:
    for k in _stats:
        _stats[k] = 0


def set_pin_memory(flag: bool) -> None:
    global _pin_memory
    _pin_memory = bool(flag)


def streams_for(device: torch.device) -> tuple[torch.cuda.Stream, torch.cuda.Stream]:
    """(device->host, host->device) streams of one device: one per direction,
    since a single stream would serialise the two directions."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    pair = _streams.get(index)
    if pair is None:
        with torch.cuda.device(index):
            pair = (torch.cuda.Stream(), torch.cuda.Stream())
        _streams[index] = pair
    return pair


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _host_like(x: torch.Tensor, pin: bool) -> torch.Tensor:
    # Same sizes and strides as the device tensor: the backward graph was
    # compiled for those strides, and a dense permuted layout copies as one block.
    return torch.empty_strided(
        x.size(), x.stride(), dtype=x.dtype, device="cpu", pin_memory=pin
    )


@torch.library.custom_op("offload_pass::offload", mutates_args=())
def offload(x: torch.Tensor) -> torch.Tensor:
    _stats["offload_calls"] += 1
    _stats["offload_bytes"] += _nbytes(x)
    if x.device.type != "cuda":
        # CPU path (CI): a real, separate buffer, so the backward reads a copy.
        out = _host_like(x, pin=False)
        out.copy_(x)
        return out
    host = _host_like(x, pin=_pin_memory)
    if x.numel() == 0:
        return host
    d2h, _ = streams_for(x.device)
    d2h.wait_stream(torch.cuda.current_stream(x.device))
    with torch.cuda.stream(d2h):
        host.copy_(x, non_blocking=True)
        event = torch.cuda.Event()
        event.record(d2h)
    _copy_out_events[host.data_ptr()] = event
    return host


@offload.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="cpu")


@torch.library.custom_op("offload_pass::release", mutates_args=("x",))
def release(x: torch.Tensor, host: torch.Tensor) -> None:
    if x.device.type != "cuda":
        return
    event = _copy_out_events.pop(host.data_ptr(), None)
    if event is not None:
        # Stream-side wait: the host thread never blocks here.
        torch.cuda.current_stream(x.device).wait_event(event)


@release.register_fake
def _(x: torch.Tensor, host: torch.Tensor) -> None:
    return None


@torch.library.custom_op("offload_pass::reload", mutates_args=())
def reload(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    _stats["reload_calls"] += 1
    _stats["reload_bytes"] += _nbytes(host)
    if device.type != "cuda":
        out = torch.empty_strided(host.size(), host.stride(), dtype=host.dtype, device=device)
        out.copy_(host)
        return out
    compute = torch.cuda.current_stream(device)
    # Allocated on the compute stream: the block returns to the compute
    # stream's pool when the backward graph drops it.
    out = torch.empty_strided(host.size(), host.stride(), dtype=host.dtype, device=device)
    if host.numel() == 0:
        return out
    _, h2d = streams_for(device)
    h2d.wait_stream(compute)
    # A reload must never read a host buffer whose copy-out is still running
    # (Megatron-LM #7398 silently corrupted gradients this way). The forward's
    # release already ordered the compute stream after it; this covers a
    # copy-out whose release never ran.
    copy_out = _copy_out_events.pop(host.data_ptr(), None)
    if copy_out is not None:
        h2d.wait_event(copy_out)
    with torch.cuda.stream(h2d):
        out.copy_(host, non_blocking=True)
        event = torch.cuda.Event()
        event.record(h2d)
    _reload_events[out.data_ptr()] = event
    return out


@reload.register_fake
def _(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    return torch.empty_strided(host.size(), host.stride(), dtype=host.dtype, device=device)


@torch.library.custom_op("offload_pass::wait_reload", mutates_args=("x",))
def wait_reload(x: torch.Tensor) -> None:
    if x.device.type != "cuda":
        return
    event = _reload_events.pop(x.data_ptr(), None)
    if event is not None:
        torch.cuda.current_stream(x.device).wait_event(event)


@wait_reload.register_fake
def _(x: torch.Tensor) -> None:
    return None


def pending_events() -> tuple[int, int]:
    """Events not yet consumed: (copy-out, reload). Both drop to zero after a
    full step; tests use this to catch leaks."""
    return len(_copy_out_events), len(_reload_events)


OPS = {
    "offload": torch.ops.offload_pass.offload.default,
    "release": torch.ops.offload_pass.release.default,
    "reload": torch.ops.offload_pass.reload.default,
    "wait_reload": torch.ops.offload_pass.wait_reload.default,
}
