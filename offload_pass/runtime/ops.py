"""Runtime ops that the rewritten graphs call.

Takes: tensors from the compiled forward / backward graphs. Gives four
``torch.library`` custom ops in the ``offload_pass`` namespace, each with a fake
implementation so Inductor can trace and schedule them:

- ``offload(x, pin_memory, host_limit, pool, pool_bytes, offset, slot_bytes) -> host``:
  device->host copy of ``x`` on the device->host stream, into its slot of the
  graph's host pool (one page-locked buffer the size the plan asked for,
  reused every step; see "Host pools" below); records a completion event. If
  host memory cannot be had (allocation failure, or the cap reached), a
  device copy stands in, with one warning: slower, never wrong.
- ``release(x, host!)``: the compute stream waits for that event. It is the last
  use of ``x`` in the forward graph, so the graph frees ``x`` right after it, and
  the wait makes that reuse safe without ``record_stream``. Declared as
  mutating ``host`` (not ``x``: see the op), and it raises if ``host`` is not
  the tensor an ``offload`` returned (a copy the compiler made in between).
- ``reload(host) -> x``: host->device copy on the host->device stream into memory
  allocated on the compute stream (after the copy-out of ``host`` completed).
- ``wait_reload(x!)``: the compute stream waits for the reload; placed right
  before the first consumer, which reads ``x`` after this "mutation" and so can
  never be scheduled before it.

On CPU tensors the same ops run synchronously into separate buffers, so CPU
tests execute the real rewritten graphs. A tensor whose elements share memory
(an ``expand``) is copied as its flat extent: the same bytes, each once.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
import weakref
from typing import Optional

import torch
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["stats", "reset_stats", "streams_for", "host_pool_stats", "clear_host_pools"]

# Completion events keyed by the data pointer of the tensor they guard. A key is
# unique while its tensor is alive, and every tensor stays alive until its event
# is consumed (the graph holds it), so pointer reuse cannot alias two events.
_copy_out_events: dict[int, torch.cuda.Event] = {}
_reload_events: dict[int, torch.cuda.Event] = {}
# Host copies made and not yet released, by data pointer. A release handed
# any other host tensor means the compiler copied the host copy in between
# (a CPU kernel that may read it before its copy-out has landed): an error,
# never a silent wrong gradient.
_unreleased_hosts: set[int] = set()
# Inductor may give a custom op's input another layout than its fake value
# has (a clone it lays out as its consumer prefers); the host copy then has
# those strides, and Inductor copies it back to the fake's strides before the
# graph returns it. Exact strides keep the copy the graph's own output.
_EXACT_STRIDES = tuple(t for t in (getattr(torch.Tag, "needs_exact_strides", None),) if t is not None)
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
    """Host bytes that offloaded copies hold right now (pool slots in use
    and copies outside a pool)."""
    return _host_bytes[0] + sum(a.bytes_in_use() for arenas in _pools.values() for a in arenas)


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


def _stay_on_device(x: torch.Tensor, why: str) -> torch.Tensor:
    """The fallback when host memory cannot be had: a device copy stands in
    for the host copy (memory-neutral: ``x`` itself is released), the
    backward reads it like any reload, and the gradients stay exact. The
    copy keeps ``x``'s strides (``clone`` would make an expanded or gapped
    view dense, and the backward was compiled for ``x``'s strides)."""
    _stats["fallback_calls"] += 1
    _warn_once(f"offload_pass: {why}; the tensor stays on device (training continues)")
    copy = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
    _copy_layout(copy, x)
    return copy


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _held(nbytes: int) -> None:
    _host_bytes[0] -= nbytes


# Host pools. The rewrite lays every copy of a graph with known sizes out in
# one buffer (``pool_bytes``, each slot at ``offset``, aligned), the size the
# plan asks for: PyTorch's pinned allocator rounds each allocation up to a
# power of two (a 96 MiB copy would hold 128 MiB). The buffer is allocated and
# page-locked once (cudaHostRegister, exactly ``pool_bytes``) and reused every
# step. A slot is handed out as a tensor with a storage of its own, so that
# the slot is known to be free exactly when no tensor refers to that storage
# any more (autograd's saved copies included). A call that finds its slot
# still held (two forwards before one backward, one graph run for several
# layers) takes the slot in the next buffer of the same layout ("arena"),
# allocating one if none is free: a slot is never written while a copy in it
# may still be read.

@dataclasses.dataclass
class _Arena:
    buffer: torch.Tensor  # uint8 host memory: a page more than ``nbytes``, to align ``base``
    base: int  # the first page boundary in it: the pool's ``nbytes`` start here
    nbytes: int
    pinned: bool
    slots: dict  # offset -> (StorageWeakRef of the slot handed out there, bytes)

    def free(self, offset: int) -> bool:
        held = self.slots.get(offset)
        return held is None or held[0].expired()

    def bytes_in_use(self) -> int:
        return sum(n for ref, n in self.slots.values() if not ref.expired())


PAGE_BYTES = 4096
# (pool key, pinned) -> arenas of that layout, oldest first.
_pools: dict[tuple[str, bool], list[_Arena]] = {}
# Pools whose buffer could not be had: their copies are allocated one by one
# from then on, without trying again on every call.
_unavailable: set[tuple[str, bool]] = set()
# Reload events by slot address: a slot's next copy-out waits for the last
# reload that read it (the compute stream normally has already, through
# wait_reload; this does not depend on it).
_slot_reads: dict[int, torch.cuda.Event] = {}
_slot_addresses: set[int] = set()
_can_pool = hasattr(torch._C, "_construct_storage_from_data_pointer")


@functools.lru_cache(maxsize=None)
def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _page_locked(nbytes: int, pin: bool) -> tuple[torch.Tensor, int]:
    """``nbytes`` of host memory starting at a page boundary, page-locked when
    ``pin`` (exactly that many bytes: no power-of-two rounding)."""
    raw = torch.empty(nbytes + PAGE_BYTES, dtype=torch.uint8)
    skip = -raw.data_ptr() % PAGE_BYTES
    base = raw.data_ptr() + skip
    if pin:
        register = getattr(torch.cuda.cudart(), "cudaHostRegister", None)
        if register is None:
            raise RuntimeError("this torch build exposes no cudaHostRegister")
        error = register(base, nbytes, 0)
        if int(getattr(error, "value", error)) != 0:
            raise RuntimeError(f"cudaHostRegister of {nbytes} bytes failed ({error})")
    return raw, base


def extent_bytes(x: torch.Tensor) -> int:
    """Bytes a tensor with ``x``'s sizes and strides spans from its first element."""
    if x.numel() == 0:
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(x.size(), x.stride()))) * x.element_size()


def _pool_slot(
    x: torch.Tensor, pool: str, pool_bytes: int, offset: int, slot_bytes: int, pin: bool
) -> torch.Tensor:
    """A host tensor shaped like ``x`` in its slot of a free arena of ``pool``."""
    nbytes = extent_bytes(x)
    if offset < 0 or nbytes > slot_bytes or offset + slot_bytes > pool_bytes:
        raise ValueError(
            f"offload_pass: a copy of {nbytes} bytes does not fit its host-pool slot "
            f"[{offset}, {offset + slot_bytes}) of {pool_bytes} bytes (pool {pool!r}): the graph "
            "runs with other sizes than it was planned for"
        )
    arenas = _pools.setdefault((pool, pin), [])
    arena = next((a for a in arenas if a.free(offset)), None)
    if arena is None:
        raw, base = _page_locked(pool_bytes, pin)
        arena = _Arena(raw, base, pool_bytes, pin, {})
        arenas.append(arena)
    address = arena.base + offset
    storage = torch._C._construct_storage_from_data_pointer(address, torch.device("cpu"), nbytes)
    host = torch.empty(0, dtype=x.dtype).set_(storage, 0, x.size(), x.stride())
    arena.slots[offset] = (StorageWeakRef(host.untyped_storage()), nbytes)
    _slot_addresses.add(address)
    return host


def host_pool_stats() -> dict[str, int]:
    """Host pools now: ``arenas`` (buffers), ``bytes`` (their size, all of
    it page-locked for CUDA copies) and ``in_use`` (bytes of slots that
    offloaded copies hold)."""
    arenas = [a for group in _pools.values() for a in group]
    return {
        "arenas": len(arenas),
        "bytes": sum(a.nbytes for a in arenas),
        "in_use": sum(a.bytes_in_use() for a in arenas),
    }


def clear_host_pools() -> int:
    """Free the host-pool buffers no offloaded copy holds any more (a later
    step allocates them again). Returns how many were freed."""
    freed = 0
    _unavailable.clear()
    for key, arenas in list(_pools.items()):
        keep = []
        for arena in arenas:
            if arena.bytes_in_use():
                keep.append(arena)
                continue
            if arena.pinned:
                # A copy queued on a stream may still touch the buffer.
                torch.cuda.synchronize()
                torch.cuda.cudart().cudaHostUnregister(arena.base)
            for offset in arena.slots:
                _slot_addresses.discard(arena.base + offset)
                _slot_reads.pop(arena.base + offset, None)
            freed += 1
        if keep:
            _pools[key] = keep
        else:
            del _pools[key]
    return freed


@torch.library.custom_op("offload_pass::offload", mutates_args=(), tags=_EXACT_STRIDES)
def offload(
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
        _unreleased_hosts.add(host.data_ptr())
    return host


def _copy_out(
    x: torch.Tensor, pin_memory: bool, host_limit: int, pool: str, pool_bytes: int, offset: int, slot_bytes: int
) -> torch.Tensor:
    nbytes = _nbytes(x)
    if host_limit >= 0 and host_bytes_held() + nbytes > host_limit:
        return _stay_on_device(x, f"host memory cap reached (host_memory_limit={host_limit} bytes)")
    pin = pin_memory and x.device.type == "cuda"
    host: Optional[torch.Tensor] = None
    # One buffer serves the whole call, so it is page-locked whenever CUDA
    # copies may use it: a graph on the GPU can save a CPU tensor (the RNG
    # seed of efficient attention) that its fake value placed on the GPU.
    key = (pool, pin_memory and _cuda_available())
    if pool and _can_pool and key not in _unavailable:
        try:
            host = _pool_slot(x, pool, pool_bytes, offset, slot_bytes, key[1])
        except RuntimeError as error:  # no page-locked memory to be had
            _unavailable.add(key)
            _warn_once(f"offload_pass: host pool of {pool_bytes} bytes unavailable ({error}); "
                       "copies are allocated one by one")
    if host is None:
        try:
            host = _host_like(x, pin=pin)
        except RuntimeError as error:  # pinned (page-locked) memory exhausted
            return _stay_on_device(x, f"host memory allocation failed ({error})")
        _host_bytes[0] += nbytes
        weakref.finalize(host, _held, nbytes)
    _stats["offload_calls"] += 1
    _stats["offload_bytes"] += nbytes
    if x.device.type != "cuda":
        # CPU path (CI): a real, separate buffer, so the backward reads a copy.
        _copy_layout(host, x)
        return host
    if x.numel() == 0:
        return host
    d2h, _ = streams_for(x.device)
    d2h.wait_stream(torch.cuda.current_stream(x.device))
    last_read = _slot_reads.pop(host.data_ptr(), None)
    if last_read is not None:
        d2h.wait_event(last_read)
    with torch.cuda.stream(d2h):
        _copy_layout(host, x, non_blocking=True)
        event = torch.cuda.Event()
        event.record(d2h)
    _copy_out_events[host.data_ptr()] = event
    return host


@offload.register_fake
def _(
    x: torch.Tensor,
    pin_memory: bool = True,
    host_limit: int = -1,
    pool: str = "",
    pool_bytes: int = 0,
    offset: int = 0,
    slot_bytes: int = 0,
) -> torch.Tensor:
    return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="cpu")


# Declared as writing ``host`` (where the copy lands), which keeps the op in
# the graph; reading ``x`` keeps ``x`` alive until the release. Declaring
# ``x`` written made Inductor compute every pending reader of ``x`` before
# the release, apart from the consumers it would have been fused into: other
# kernels, gradients one ulp off (random draws 4509, 4934).
@torch.library.custom_op("offload_pass::release", mutates_args=("host",))
def release(x: torch.Tensor, host: torch.Tensor) -> None:
    if host.device.type == "cpu" and host.numel():
        if host.data_ptr() not in _unreleased_hosts:
            raise RuntimeError(
                f"offload_pass: release was handed a host tensor {tuple(host.shape)} that no offload call "
                "returned (the compiler copied the host copy between the two ops), so its copy-out "
                "cannot be waited on; please report this graph"
            )
        _unreleased_hosts.discard(host.data_ptr())
    if x.device.type != "cuda":
        return
    event = _copy_out_events.pop(host.data_ptr(), None)
    if event is not None:
        # Stream-side wait: the host thread never blocks here.
        torch.cuda.current_stream(x.device).wait_event(event)


@release.register_fake
def _(x: torch.Tensor, host: torch.Tensor) -> None:
    return None


def _reload_buffer(host: torch.Tensor, device: torch.device, align: int) -> torch.Tensor:
    """A tensor of ``host``'s size and strides on ``device``, starting
    ``align`` elements into a fresh storage (see ``reload``)."""
    if align == 0:
        return torch.empty_strided(host.size(), host.stride(), dtype=host.dtype, device=device)
    storage = torch.empty(align + extent_bytes(host) // host.element_size(), dtype=host.dtype, device=device)
    return storage.as_strided(host.size(), host.stride(), align)


@torch.library.custom_op("offload_pass::reload", mutates_args=())
def reload(host: torch.Tensor, device: torch.device, align: int = 0) -> torch.Tensor:
    """``align``: elements the reloaded tensor starts into its storage, so
    that it lies at the same address alignment as the view it stands for
    (CPU and GPU kernels may pick another code path, and round otherwise,
    for an address aligned otherwise)."""
    _stats["reload_calls"] += 1
    _stats["reload_bytes"] += _nbytes(host)
    if device.type != "cuda" or host.device.type == "cuda":
        # CPU path, or a fallback copy that never left the device.
        out = _reload_buffer(host, device, align)
        _copy_layout(out, host)
        return out
    compute = torch.cuda.current_stream(device)
    # Allocated on the compute stream: the block returns to the compute
    # stream's pool when the backward graph drops it.
    out = _reload_buffer(host, device, align)
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
        _copy_layout(out, host, non_blocking=True)
        event = torch.cuda.Event()
        event.record(h2d)
    _reload_events[out.data_ptr()] = event
    if host.data_ptr() in _slot_addresses:
        _slot_reads[host.data_ptr()] = event
    return out


@reload.register_fake
def _(host: torch.Tensor, device: torch.device, align: int = 0) -> torch.Tensor:
    return _reload_buffer(host, device, align)


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
