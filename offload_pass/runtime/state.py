"""The runtime's mutable state, all of it in one object.

Takes: nothing; the ops (``ops.py``) and the host pools (``host_pool.py``)
read and write it. Gives ``CopyStreams`` (one device's copy streams),
``RuntimeState`` and ``STATE``, the one instance the runtime uses: copy
counters, host bytes held, the host pools, the copy streams, the completion
events that order copies against the compute stream, and the warnings
already given. ``STATE.reset()`` returns it to what a fresh
import has (for tests, between steps).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

import torch

from offload_pass.runtime.arena import Arena
from offload_pass.runtime.numa import Placement

__all__ = ["CopyStreams", "RuntimeState", "STATE", "STAT_KEYS"]

# Counters for tests and reports: copies and bytes in each direction.
STAT_KEYS = (
    "offload_calls", "offload_bytes", "reload_calls", "reload_bytes", "fallback_calls",
    # Copy-outs whose release waited for another tensor than the one copied:
    # the compiler handed ``offload`` a temporary of its own (kept alive by
    # ``copy_sources`` until its copy landed).
    "temporary_sources",
)


def _zero_stats() -> dict[str, int]:
    return dict.fromkeys(STAT_KEYS, 0)


@dataclasses.dataclass
class CopyStreams:
    """One device's copy streams, one per direction (a single stream would
    serialise the two directions), and what the ops keep to launch copies
    cheaply on them."""

    index: int  # the device's index
    d2h: torch.cuda.Stream
    h2d: torch.cuda.Stream
    # The compute streams seen, by torch._C._cuda_getCurrentStream's tuple,
    # each with its fork event: recorded on that stream and waited on by a
    # copy stream before each copy (one event, recorded again every copy).
    compute: dict[tuple, tuple[torch.cuda.Stream, torch.cuda.Event]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RuntimeState:
    stats: dict[str, int] = dataclasses.field(default_factory=_zero_stats)
    # Host bytes held now by offloaded copies outside a pool (the finalizers
    # that run when such a copy is freed take its bytes off again).
    host_bytes: int = 0
    # Counts the resets: a copy made before the last one was counted in a
    # ``host_bytes`` that is gone, so its finalizer leaves this one alone.
    generation: int = 0
    warned: set[str] = dataclasses.field(default_factory=set)
    # Completion events keyed by the data pointer of the tensor they guard. A
    # key is unique while its tensor is alive, and every tensor stays alive
    # until its event is consumed (the graph holds it), so pointer reuse
    # cannot alias two events.
    copy_out_events: dict[int, torch.cuda.Event] = dataclasses.field(default_factory=dict)
    reload_events: dict[int, torch.cuda.Event] = dataclasses.field(default_factory=dict)
    # The device tensor each copy-out in flight reads, by its host copy's data
    # pointer: held until the compute stream has waited for the copy (the
    # release, or a reload whose release never ran). The graph's own
    # reference is not enough: Inductor may hand ``offload`` a copy of the
    # tensor made for the op's exact strides and free it as soon as the op
    # returns, while the copy still reads it; the allocator would then give
    # its memory to the next kernel (wrong gradients, now and then).
    # Kept on the CPU too (nothing in flight there) so that the release counts
    # a temporary the compiler made on either device (``temporary_sources``).
    copy_sources: dict[int, torch.Tensor] = dataclasses.field(default_factory=dict)
    # Host copies made and not yet released, by data pointer. A release handed
    # any other host tensor means the compiler copied the host copy in between
    # (a CPU kernel that may read it before its copy-out has landed): an error,
    # never a silent wrong gradient.
    unreleased_hosts: set[int] = dataclasses.field(default_factory=set)
    # Device index -> its copy streams.
    streams: dict[int, CopyStreams] = dataclasses.field(default_factory=dict)
    # (pool key, pinned) -> arenas of that layout, oldest first.
    pools: dict[tuple[str, bool], list[Arena]] = dataclasses.field(default_factory=dict)
    # Pools whose buffer could not be had: their copies are allocated one by
    # one from then on, without trying again on every call.
    unavailable: set[tuple[str, bool]] = dataclasses.field(default_factory=set)
    # Reload events by slot address: a slot's next copy-out waits for the last
    # reload that read it (the compute stream normally has already, through
    # wait_reload; this does not depend on it).
    slot_reads: dict[int, torch.cuda.Event] = dataclasses.field(default_factory=dict)
    slot_addresses: set[int] = dataclasses.field(default_factory=set)
    # While a call is measured (feedback/measure.py): the (before, after)
    # event pairs around each stall of the compute stream on a copy.
    wait_timing: Optional[list[tuple[torch.cuda.Event, torch.cuda.Event]]] = None
    # Device index -> where its host pools' pinned pages go (``numa.device_node``), found once.
    placements: dict[int, Placement] = dataclasses.field(default_factory=dict)
    # torch.cuda.is_available(), asked once (None: not yet).
    cuda_available: Optional[bool] = None

    def warn_once(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def reset(self) -> None:
        """Return every field to its freshly-imported value (``generation``
        aside, which counts on). Host-pool buffers are unpinned and dropped;
        refused while an offloaded copy still holds a slot in one, since its
        memory would be freed under it."""
        held = sum(a.bytes_in_use() for arenas in self.pools.values() for a in arenas)
        if held:
            raise RuntimeError(
                f"offload_pass: runtime reset while offloaded copies hold {held} bytes of host-pool "
                "slots; drop them (finish the backward) first"
            )
        for arenas in self.pools.values():
            for arena in arenas:
                arena.unregister()
        fresh = RuntimeState(generation=self.generation + 1)
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(fresh, field.name))


STATE = RuntimeState()
