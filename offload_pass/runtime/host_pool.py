"""Host memory for offloaded copies: the page-locked host pools.

Takes: a tensor to copy out and, from the rewrite, its host-pool slot (a
layout key, the pool's size, the slot's offset and size). Gives a host
tensor of the same sizes and strides for the copy to land in
(``host_buffer``), and the pools' accounting (``host_bytes_held``,
``host_pool_stats``, ``clear_host_pools``). Its state lives in ``state.STATE``.

The rewrite lays a graph's copies out in one buffer of exactly the plan's
size, page-locked once and reused every step, since PyTorch's pinned
allocator rounds each allocation up to a power of two. A slot is handed out
as a tensor with a storage of its own, weakly referenced by the pool, so it
is free exactly when nothing refers to that storage. A slot still held (two
forwards before one backward) is taken in the next buffer of that layout
(an ``Arena``): a slot is never written while a copy in it may be read.
"""

from __future__ import annotations

import weakref
from typing import Optional

import torch

from offload_pass.enums import PlacementCode
from offload_pass.runtime import numa
from offload_pass.runtime.arena import Arena, expired
from offload_pass.runtime.numa import Placement
from offload_pass.runtime.state import STATE

__all__ = ["PAGE_BYTES", "extent_bytes", "host_buffer", "host_bytes_held", "host_pool_stats", "clear_host_pools"]

PAGE_BYTES = 4096
_CAN_POOL = hasattr(torch._C, "_construct_storage_from_data_pointer")
_CPU = torch.device("cpu")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def extent_bytes(x: torch.Tensor) -> int:
    """Bytes a tensor with ``x``'s sizes and strides spans from its first element."""
    if x.numel() == 0:
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(x.size(), x.stride()))) * x.element_size()


def _cuda_available() -> bool:
    if STATE.cuda_available is None:
        STATE.cuda_available = torch.cuda.is_available()
    return STATE.cuda_available


def _host_like(x: torch.Tensor, pin: bool) -> torch.Tensor:
    # Same sizes and strides as the device tensor: the backward graph was
    # compiled for those strides, and a dense permuted layout copies as one block.
    return torch.empty_strided(
        x.size(), x.stride(), dtype=x.dtype, device="cpu", pin_memory=pin
    )


def _placement(device: torch.device) -> Placement:
    """Where the pinned pool pages copied to and from ``device`` go (``numa.device_node``), found once per device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    found = STATE.placements.get(index)
    if found is None:
        found = STATE.placements[index] = numa.device_node(str(torch.cuda.get_device_properties(index).uuid))
    return found


def _page_locked(nbytes: int, pin: bool, device: torch.device = _CPU) -> tuple[torch.Tensor, int, Optional[int]]:
    """``nbytes`` of host memory starting at a page boundary, page-locked when
    ``pin`` (exactly that many bytes: no power-of-two rounding), and the NUMA
    node its pages were bound to first (``device``'s, ``numa``; None: not
    bound). Binding that fails is said once and the buffer page-locked where
    the host puts it."""
    raw = torch.empty(nbytes + PAGE_BYTES, dtype=torch.uint8)
    skip = -raw.data_ptr() % PAGE_BYTES
    base = raw.data_ptr() + skip
    node = None
    if pin and device.type == "cuda":
        where = _placement(device)
        if where.code is PlacementCode.PLACED:
            bound = numa.prefer_node(base, nbytes, where.node)
            if bound.code is PlacementCode.PLACED:
                node = bound.node
            else:
                STATE.warn_once(f"offload_pass: host pool for {device}: {bound.describe()}")
    if pin:
        register = getattr(torch.cuda.cudart(), "cudaHostRegister", None)
        if register is None:
            raise RuntimeError("this torch build exposes no cudaHostRegister")
        error = register(base, nbytes, 0)
        if int(getattr(error, "value", error)) != 0:
            raise RuntimeError(f"cudaHostRegister of {nbytes} bytes failed ({error})")
    return raw, base, node


def _pool_slot(
    x: torch.Tensor, pool: str, pool_bytes: int, offset: int, slot_bytes: int, pin: bool
) -> torch.Tensor:
    """A host tensor shaped like ``x`` in its slot of a free arena of ``pool``."""
    arena, held = None, None
    for candidate in STATE.pools.get((pool, pin), ()):
        held = candidate.slots.get(offset)
        if held is None or expired(held[0]):
            arena = candidate
            break
    if arena is None:
        raw, base, node = _page_locked(pool_bytes, pin, x.device)
        arena, held = Arena(raw, base, pool_bytes, pin, {}, node), None
        STATE.pools.setdefault((pool, pin), []).append(arena)
    address = arena.base + offset
    nbytes = extent_bytes(x)  # every call: layouts of one key may hold copies of other sizes
    if held is None:  # the slot's first use in this arena
        if offset < 0 or nbytes > slot_bytes or offset + slot_bytes > arena.nbytes:
            raise ValueError(_misfit(nbytes, pool, pool_bytes, offset, slot_bytes))
        STATE.slot_addresses.add(address)
    storage = torch._C._construct_storage_from_data_pointer(address, _CPU, slot_bytes)
    try:
        host = torch.empty(0, dtype=x.dtype).set_(storage, 0, x.size(), x.stride())
    except RuntimeError:  # x spans more than the slot: a graph run with other sizes
        del storage  # the slot stays as it was (free)
        raise ValueError(_misfit(nbytes, pool, pool_bytes, offset, slot_bytes)) from None
    # The new reference is stored before the old one is freed: an exception
    # in between leaves a valid (expired) reference, never a dangling one.
    arena.slots[offset] = (storage._weak_ref(), nbytes)
    if held is not None:
        torch.UntypedStorage._free_weak_ref(held[0])
    return host


def _misfit(nbytes: int, pool: str, pool_bytes: int, offset: int, slot_bytes: int) -> str:
    return (
        f"offload_pass: a copy of {nbytes} bytes does not fit its host-pool slot "
        f"[{offset}, {offset + slot_bytes}) of {pool_bytes} bytes (pool {pool!r}): the graph "
        "runs with other sizes than it was planned for"
    )


def _held(generation: int, nbytes: int) -> None:
    if STATE.generation == generation:
        STATE.host_bytes -= nbytes


def host_buffer(
    x: torch.Tensor, pin_memory: bool, pool: str, pool_bytes: int, offset: int, slot_bytes: int
) -> torch.Tensor:
    """Where the copy of ``x`` lands: its slot of ``pool`` (empty: no pool),
    else a host tensor of its own. Raises RuntimeError when no host memory
    can be had (the caller keeps ``x`` on device)."""
    host: Optional[torch.Tensor] = None
    # One buffer serves the whole call, so it is page-locked whenever CUDA
    # copies may use it: a graph on the GPU can save a CPU tensor (the RNG
    # seed of efficient attention) that its fake value placed on the GPU.
    key = (pool, pin_memory and _cuda_available())
    if pool and _CAN_POOL and key not in STATE.unavailable:
        try:
            host = _pool_slot(x, pool, pool_bytes, offset, slot_bytes, key[1])
        except RuntimeError as error:  # no page-locked memory to be had
            STATE.unavailable.add(key)
            STATE.warn_once(f"offload_pass: host pool of {pool_bytes} bytes unavailable ({error}); "
                            "copies are allocated one by one")
    if host is None:
        # A RuntimeError here: pinned (page-locked) memory exhausted.
        host = _host_like(x, pin=pin_memory and x.device.type == "cuda")
        nbytes = _nbytes(x)
        STATE.host_bytes += nbytes
        weakref.finalize(host, _held, STATE.generation, nbytes)
    return host


def host_bytes_held() -> int:
    """Host bytes that offloaded copies hold right now (pool slots in use
    and copies outside a pool)."""
    return STATE.host_bytes + sum(a.bytes_in_use() for arenas in STATE.pools.values() for a in arenas)


def host_pool_stats() -> dict[str, int]:
    """Host pools now: ``arenas`` (buffers), ``bytes`` (their size, all of
    it page-locked for CUDA copies), ``in_use`` (bytes of slots that
    offloaded copies hold) and ``bytes_on_gpu_node`` (bytes of the buffers
    whose pages were bound to their GPU's NUMA node, ``numa``)."""
    arenas = [a for group in STATE.pools.values() for a in group]
    return {
        "arenas": len(arenas),
        "bytes": sum(a.nbytes for a in arenas),
        "in_use": sum(a.bytes_in_use() for a in arenas),
        "bytes_on_gpu_node": sum(a.nbytes for a in arenas if a.node is not None),
    }


def clear_host_pools() -> int:
    """Free the host-pool buffers no offloaded copy holds any more (a later
    step allocates them again). Returns how many were freed."""
    freed = 0
    STATE.unavailable.clear()
    for key, arenas in list(STATE.pools.items()):
        keep = []
        for arena in arenas:
            if arena.bytes_in_use():
                keep.append(arena)
                continue
            for offset in arena.slots:
                STATE.slot_addresses.discard(arena.base + offset)
                STATE.slot_reads.pop(arena.base + offset, None)
            arena.unregister()
            freed += 1
        if keep:
            STATE.pools[key] = keep
        else:
            del STATE.pools[key]
    return freed
