"""Runtime ops that the rewritten graphs call.

Takes: tensors from the compiled forward / backward graphs. Gives four
``torch.library`` custom ops in the ``offload_pass`` namespace, each with a fake
implementation so Inductor can trace and schedule them:

- ``offload(x, pin_memory, host_limit) -> host``: device->host copy of ``x``
  on the device->host stream, into pinned memory; records a completion event.
  If host memory cannot be had (allocation failure, or the cap reached), a
  device copy stands in, with one warning: slower, never wrong.
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

import warnings
import weakref

import torch

__all__ = ["stats", "reset_stats", "streams_for"]

# Completion events keyed by the data pointer of the tensor they guard. A key is
# unique while its tensor is alive, and every tensor stays alive until its event
# is consumed (the graph holds it), so pointer reuse cannot alias two events.
_copy_out_events: dict[int, torch.cuda.Event] = {}
_reload_events: dict[int, torch.cuda.Event] = {}
_streams: dict[int, tuple[torch.cuda.Stream, torch.cuda.Stream]] = {}

# Counters for tests and reports: copies and bytes in each direction.
_stats = {
    "offload_calls": 0,
    "offload_bytes": 0,
    "reload_calls": 0,
    "reload_bytes": 0,
    "fallback_calls": 0,
}
# Host bytes held by offloaded copies now (a one-element list: mutable from
# the finalizers that run when a host copy is freed).
_host_bytes = [0]
_warned: set[str] = set()


def stats() -> dict[str, int]:
    return dict(_stats)


def reset_stats() -> None:
    for k in _stats:
        _stats[k] = 0


def host_bytes_held() -> int:
    """Host bytes that offloaded copies hold right now."""
    return _host_bytes[0]


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


def _stay_on_device(x: torch.Tensor, why: str) -> torch.Tensor:
    """The fallback when host memory cannot be had: a device copy stands in
    for the host copy (memory-neutral: ``x`` itself is released), the
    backward reads it like any reload, and the gradients stay exact."""
    _stats["fallback_calls"] += 1
    message = f"offload_pass: {why}; the tensor stays on device (training continues)"
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return x.clone()


def _held(nbytes: int) -> None:
    _host_bytes[0] -= nbytes


@torch.library.custom_op("offload_pass::offload", mutates_args=())
def offload(x: torch.Tensor, pin_memory: bool = True, host_limit: int = -1) -> torch.Tensor:
    """``host_limit`` >= 0 caps the host bytes that offloaded copies hold at once."""
    nbytes = _nbytes(x)
    if host_limit >= 0 and _host_bytes[0] + nbytes > host_limit:
        return _stay_on_device(x, f"host memory cap reached (host_memory_limit={host_limit} bytes)")
    try:
        host = _host_like(x, pin=pin_memory and x.device.type == "cuda")
    except RuntimeError as error:  # pinned (page-locked) memory exhausted
        return _stay_on_device(x, f"host memory allocation failed ({error})")
    _stats["offload_calls"] += 1
    _stats["offload_bytes"] += nbytes
    _host_bytes[0] += nbytes
    weakref.finalize(host, _held, nbytes)
    if x.device.type != "cuda":
        # CPU path (CI): a real, separate buffer, so the backward reads a copy.
        host.copy_(x)
        return host
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
def _(x: torch.Tensor, pin_memory: bool = True, host_limit: int = -1) -> torch.Tensor:
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
    if device.type != "cuda" or host.device.type == "cuda":
        # CPU path, or a fallback copy that never left the device.
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
