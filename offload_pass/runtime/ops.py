"""Runtime ops that the rewritten graphs call.

Takes: tensors from the compiled forward / backward graphs. Gives four
``torch.library`` custom ops in the ``offload_pass`` namespace (``OPS``), each
with a fake implementation so Inductor can trace and schedule them:

- ``offload(x, ...) -> host``: device->host copy of ``x`` on the copy stream
  into its host-pool slot; records a completion event. Without host memory
  a device copy stands in, with one warning: slower, never wrong.
- ``release(x, host!)``: the compute stream waits for that event; as the last
  use of ``x`` in the forward, it makes freeing ``x`` safe without
  ``record_stream``. The tensor the copy reads is held until then
  (``STATE.copy_sources``); a ``host`` no ``offload`` returned is an error.
- ``reload(host) -> x``: host->device copy into memory allocated on the
  compute stream.
- ``wait_reload(x!)``: the compute stream waits for the reload; as a
  "mutation" of ``x`` before its first consumer, it is never scheduled after.

On CPU tensors the ops run synchronously, so CPU tests execute the real
rewritten graphs. Also gives ``stats``, ``reset_stats``, ``streams_for`` and
``pending_events``; the state lives in ``state.STATE``.
"""

from __future__ import annotations

import torch

from offload_pass.runtime.host_pool import _nbytes, extent_bytes, host_buffer, host_bytes_held
from offload_pass.runtime.state import STATE, CopyStreams

__all__ = [
    "OPS", "offload", "release", "reload", "wait_reload",
    "stats", "reset_stats", "streams_for", "pending_events",
]

def stats() -> dict[str, int]:
    return dict(STATE.stats)


def reset_stats() -> None:
    for k in STATE.stats:
        STATE.stats[k] = 0


def _device_streams(index: int) -> CopyStreams:
    """The copy streams of device ``index``, made on first use."""
    streams = STATE.streams.get(index)
    if streams is None:
        with torch.cuda.device(index):
            streams = CopyStreams(index, torch.cuda.Stream(), torch.cuda.Stream())
        STATE.streams[index] = streams
    return streams


def streams_for(device: torch.device) -> tuple[torch.cuda.Stream, torch.cuda.Stream]:
    """(device->host, host->device) streams of one device: one per direction,
    since a single stream would serialise the two directions."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    streams = _device_streams(index)
    return streams.d2h, streams.h2d


# The ops run on the launch path of every copy: a forward whose launches are
# its critical path pays their host time per copy. So the CUDA path below
# calls the C methods of streams and events directly (torch.cuda.Event's
# record/wait and torch.cuda.current_stream are Python wrappers around them
# that look the current stream up again and build a Stream object each
# time), and switches streams without the ``torch.cuda.stream`` context
# manager (benchmarks/op_host_cost.py times both).
def _compute_stream(streams: CopyStreams) -> tuple[torch.cuda.Stream, torch.cuda.Event]:
    """The current stream of the copy streams' device (the compute stream the
    graph runs on) and its fork event, both made once per stream and kept."""
    raw = torch._C._cuda_getCurrentStream(streams.index)
    compute = streams.compute.get(raw)
    if compute is None:
        stream = torch.cuda.Stream(stream_id=raw[0], device_index=raw[1], device_type=raw[2])
        fork = torch.cuda.Event()
        # Recorded once before it is shared: an event is created on its first
        # record, unlocked, and a wait from another thread on an event still
        # being created could take a handle never recorded, and order nothing.
        _record(fork, stream)
        compute = streams.compute[raw] = (stream, fork)
    return compute


def _record(event: torch.cuda.Event, stream: torch.cuda.Stream) -> None:
    torch._C._CudaEventBase.record(event, stream)


def _wait(event: torch.cuda.Event, stream: torch.cuda.Stream) -> None:
    torch._C._CudaEventBase.wait(event, stream)


def _copy_layout(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> None:
    """``dst.copy_(src)`` for two tensors of one size and stride. A layout
    whose elements share memory (an ``expand``: stride 0) cannot be written
    element by element, so its extent is copied as one flat block instead:
    the same bytes, each once."""
    if torch._debug_has_internal_overlap(dst) == 0:
        dst.copy_(src, non_blocking=non_blocking)
        return
    elements = extent_bytes(src) // src.element_size()
    flat = (elements,), (1,)
    dst.as_strided(*flat, dst.storage_offset()).copy_(
        src.as_strided(*flat, src.storage_offset()), non_blocking=non_blocking
    )


def _copy_on(
    streams: CopyStreams,
    stream: torch.cuda.Stream,
    dst: torch.Tensor,
    src: torch.Tensor,
    after: torch.cuda.Event | None,
) -> torch.cuda.Event:
    """An asynchronous ``_copy_layout(dst, src)`` on the copy stream
    ``stream`` of ``streams``, ordered after the work queued so far on the
    current (compute) stream of the copy streams' device and after ``after``
    (None: nothing more); returns the event recorded when it lands."""
    compute, fork = _compute_stream(streams)
    # One fork event per compute stream serves every copy: a stream's wait
    # takes the event as last recorded when the wait is queued, so recording
    # it again later changes no earlier wait.
    _record(fork, compute)
    _wait(fork, stream)
    if after is not None:
        _wait(after, stream)
    event = torch.cuda.Event()
    if torch._C._cuda_getDevice() != streams.index:
        # Setting a stream also makes its device current; the context
        # manager restores both.
        with torch.cuda.stream(stream):
            _copy_layout(dst, src, non_blocking=True)
            _record(event, stream)
        return event
    try:
        torch._C._cuda_setStream(stream.stream_id, stream.device_index, stream.device_type)
        _copy_layout(dst, src, non_blocking=True)
        _record(event, stream)
    finally:
        torch._C._cuda_setStream(compute.stream_id, compute.device_index, compute.device_type)
    return event


def _stay_on_device(x: torch.Tensor, why: str) -> torch.Tensor:
    """The fallback when host memory cannot be had: a device copy stands in
    for the host copy (memory-neutral: ``x`` itself is released), the
    backward reads it like any reload, and the gradients stay exact. The
    copy keeps ``x``'s strides (``clone`` would make an expanded or gapped
    view dense, and the backward was compiled for ``x``'s strides)."""
    STATE.stats["fallback_calls"] += 1
    STATE.warn_once(f"offload_pass: {why}; the tensor stays on device (training continues)")
    copy = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
    _copy_layout(copy, x)
    return copy


def _offload(
    x: torch.Tensor,
    pin_memory: bool = True,
    host_limit: int = -1,
    pool: str = "",
    pool_bytes: int = 0,
    offset: int = 0,
    slot_bytes: int = 0,
) -> torch.Tensor:
    """``host_limit`` >= 0 caps the host bytes that offloaded copies hold at
    once. ``pool`` (a layout key; empty: no pool), ``pool_bytes``, ``offset``
    and ``slot_bytes``: the host-pool slot the rewrite laid this copy out in."""
    host = _copy_out(x, pin_memory, host_limit, pool, pool_bytes, offset, slot_bytes)
    if host.device.type == "cpu" and host.numel():
        STATE.unreleased_hosts.add(host.data_ptr())
    return host


def _copy_out(
    x: torch.Tensor, pin_memory: bool, host_limit: int, pool: str, pool_bytes: int, offset: int, slot_bytes: int
) -> torch.Tensor:
    nbytes = _nbytes(x)
    if host_limit >= 0 and host_bytes_held() + nbytes > host_limit:
        return _stay_on_device(x, f"host memory cap reached (host_memory_limit={host_limit} bytes)")
    try:
        host = host_buffer(x, pin_memory, pool, pool_bytes, offset, slot_bytes)
    except RuntimeError as error:  # pinned (page-locked) memory exhausted
        return _stay_on_device(x, f"host memory allocation failed ({error})")
    STATE.stats["offload_calls"] += 1
    STATE.stats["offload_bytes"] += nbytes
    if not x.is_cuda:
        # CPU path (CI): a real, separate buffer, so the backward reads a copy.
        # Synchronous, so nothing needs holding; the source is recorded all
        # the same, for the release to count a temporary the compiler made
        # as on the GPU (tests see it on this machine).
        _copy_layout(host, x)
        STATE.copy_sources[host.data_ptr()] = x
        return host
    if x.numel() == 0:
        return host
    streams = _device_streams(x.get_device())
    # A pool slot is rewritten only after the last reload that read it.
    address = host.data_ptr()
    last_read = STATE.slot_reads.pop(address, None)
    event = _copy_on(streams, streams.d2h, host, x, last_read)
    STATE.copy_out_events[address] = event
    STATE.copy_sources[address] = x
    return host


def _offload_fake(x: torch.Tensor, *_settings: object, **_named: object) -> torch.Tensor:
    # The host copy: x's sizes and strides on the CPU, whatever the settings.
    return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="cpu")


def _compute_stream_waits(x: torch.Tensor, events: dict, key: int) -> None:
    """The compute stream of ``x``'s device waits for the event ``events``
    holds under ``key`` (consumed); nothing off CUDA. Stream-side wait: the
    host thread never blocks here."""
    if not x.is_cuda:
        return
    event = events.pop(key, None)
    if event is None:
        return
    stream, _ = _compute_stream(_device_streams(x.get_device()))
    timing = STATE.wait_timing  # read once: the measuring thread may clear it
    if timing is None:
        _wait(event, stream)
        return
    # A measured call (feedback/measure.py): the time between these two
    # events is how long the compute stream stalled on the copy.
    before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _record(before, stream)
    _wait(event, stream)
    _record(after, stream)
    timing.append((before, after))


def _no_result(*_args: object) -> None:
    """The fake of an op that returns nothing (``release``, ``wait_reload``)."""
    return None


# Declared as writing ``host`` (where the copy lands), which keeps the op in
# the graph; reading ``x`` keeps ``x`` alive until the release. Declaring
# ``x`` written made Inductor compute every pending reader of ``x`` before
# the release, apart from the consumers it would have been fused into: other
# kernels, gradients one ulp off (random draws 4509, 4934).
def _release(x: torch.Tensor, host: torch.Tensor) -> None:
    if host.device.type == "cpu" and host.numel():
        if host.data_ptr() not in STATE.unreleased_hosts:
            raise RuntimeError(
                f"offload_pass: release was handed a host tensor {tuple(host.shape)} that no offload call "
                "returned (the compiler copied the host copy between the two ops), so its copy-out "
                "cannot be waited on; please report this graph"
            )
        STATE.unreleased_hosts.discard(host.data_ptr())
    _compute_stream_waits(x, STATE.copy_out_events, host.data_ptr())
    # The copy's source may now be freed: the compute stream, where its
    # memory would be reused, is ordered after the copy.
    source = STATE.copy_sources.pop(host.data_ptr(), None)
    if (
        source is not None and source is not x  # the graph's own buffer: the same object
        and source.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    ):
        STATE.stats["temporary_sources"] += 1


def _reload_buffer(host: torch.Tensor, device: torch.device, align: int) -> torch.Tensor:
    """A tensor of ``host``'s size and strides on ``device``, starting
    ``align`` elements into a fresh storage (see ``_reload``)."""
    if align == 0:
        return torch.empty_strided(host.size(), host.stride(), dtype=host.dtype, device=device)
    storage = torch.empty(align + extent_bytes(host) // host.element_size(), dtype=host.dtype, device=device)
    return storage.as_strided(host.size(), host.stride(), align)


def _reload(host: torch.Tensor, device: torch.device, align: int = 0) -> torch.Tensor:
    """``align``: elements the reloaded tensor starts into its storage, so
    that it lies at the same address alignment as the view it stands for
    (CPU and GPU kernels may pick another code path, and round otherwise,
    for an address aligned otherwise)."""
    STATE.stats["reload_calls"] += 1
    STATE.stats["reload_bytes"] += _nbytes(host)
    if device.type != "cuda" or host.device.type == "cuda":
        # CPU path, or a fallback copy that never left the device.
        STATE.copy_sources.pop(host.data_ptr(), None)
        out = _reload_buffer(host, device, align)
        _copy_layout(out, host)
        return out
    # Allocated on the compute stream: the block returns to the compute
    # stream's pool when the backward graph drops it.
    out = _reload_buffer(host, device, align)
    if host.numel() == 0:
        return out
    streams = _device_streams(out.get_device())
    # A reload must never read a host buffer whose copy-out is still running
    # (it would silently corrupt the gradients). The forward's
    # release already ordered the compute stream after it; this covers a
    # copy-out whose release never ran.
    address = host.data_ptr()
    copy_out = STATE.copy_out_events.pop(address, None)
    if address in STATE.copy_sources:
        # No release ran: the compute stream waits for the copy-out before
        # the tensor it read can be freed.
        if copy_out is not None:
            _wait(copy_out, _compute_stream(streams)[0])
        del STATE.copy_sources[address]
    event = _copy_on(streams, streams.h2d, out, host, copy_out)
    STATE.reload_events[out.data_ptr()] = event
    if address in STATE.slot_addresses:
        STATE.slot_reads[address] = event
    return out


def _reload_fake(host: torch.Tensor, device: torch.device, align: int = 0) -> torch.Tensor:
    return _reload_buffer(host, device, align)


def _wait_reload(x: torch.Tensor) -> None:
    _compute_stream_waits(x, STATE.reload_events, x.data_ptr())


# The ops are defined with torch.library.Library rather than
# ``torch.library.custom_op``: the compiled graphs call them on the launch
# path of every copy, and custom_op's Python autograd and dispatch wrappers
# cost more host time than the copy's launch (benchmarks/op_host_cost.py).
# They run inside compiled graphs, where autograd is off, so the dispatcher's
# own autograd fallback serves. The schemas declare what they write:
# ``release`` writes ``host`` (not ``x``: see ``_release``), ``wait_reload``
# writes ``x``.
# A fragment: the example GroupedMLP defines its ops in the same namespace.
_LIB = torch.library.Library("offload_pass", "FRAGMENT")
_SCHEMAS = {
    "offload": (
        "offload(Tensor x, bool pin_memory=True, SymInt host_limit=-1, str pool=\"\", SymInt pool_bytes=0, "
        "SymInt offset=0, SymInt slot_bytes=0) -> Tensor",
        # Inductor lays ``x`` out as rewriting/copy_source.py says (its own fallback lowering).
        _offload, _offload_fake, (),
    ),
    # The other three take their tensors in whatever layout they have: a copy
    # of the host copy would be a kernel reading the page-locked buffer
    # before its device->host copy landed, and a copy of what they wait for
    # would be waited for instead of it.
    "release": ("release(Tensor x, Tensor(a!) host) -> ()", _release, _no_result, (torch.Tag.flexible_layout,)),
    "reload": (
        "reload(Tensor host, Device device, SymInt align=0) -> Tensor", _reload, _reload_fake,
        (torch.Tag.flexible_layout,),
    ),
    "wait_reload": ("wait_reload(Tensor(a!) x) -> ()", _wait_reload, _no_result, (torch.Tag.flexible_layout,)),
}
for _name, (_schema, _kernel, _fake, _tags) in _SCHEMAS.items():
    _LIB.define(_schema, tags=(*_tags, torch.Tag.pt2_compliant_tag))
    _LIB.impl(_name, _kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"offload_pass::{_name}", _fake, lib=_LIB)

offload = torch.ops.offload_pass.offload
release = torch.ops.offload_pass.release
reload = torch.ops.offload_pass.reload
wait_reload = torch.ops.offload_pass.wait_reload


def pending_events() -> tuple[int, int]:
    """Events not yet consumed: (copy-out, reload). Both drop to zero after a
    full step; tests use this to catch leaks (a copy-out's source is held
    exactly as long as its event: ``STATE.copy_sources``)."""
    return len(STATE.copy_out_events), len(STATE.reload_events)


OPS = {name: getattr(torch.ops.offload_pass, name).default for name in _SCHEMAS}
