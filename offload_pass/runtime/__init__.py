"""Runtime: the ops the rewritten graphs call.

Takes: the tensors the compiled forward and backward graphs hand to the four
ops the rewrite inserted (``OPS``: ``torch.ops.offload_pass.offload``,
``release``, ``reload``, ``wait_reload``). Gives asynchronous copies on one
copy stream per direction, the events that order them against the compute
stream, and the page-locked host buffers the copies land in; plus counters
and host-pool controls for tests and reports. Importing it registers the ops.

- ``ops.py``: the four custom ops, their fake implementations, the copies.
- ``host_pool.py``: host memory for the copies (pools, page-locking).
- ``arena.py``: one pool buffer and the slots it handed out.
- ``numa.py``: the GPU's NUMA node, and a pool buffer's pages bound to it.
- ``state.py``: all mutable state, in ``STATE`` (``STATE.reset()``).
"""

from offload_pass.runtime import host_pool as _host_pool
from offload_pass.runtime import numa
from offload_pass.runtime.host_pool import (
    PAGE_BYTES,
    clear_host_pools,
    extent_bytes,
    host_bytes_held,
    host_pool_stats,
)
from offload_pass.runtime.ops import (
    OPS,
    offload,
    pending_events,
    release,
    reload,
    reset_stats,
    stats,
    streams_for,
    wait_reload,
)
from offload_pass.runtime.state import STATE, RuntimeState

_page_locked = _host_pool._page_locked  # benchmarks/reliability_gpu.py times it

__all__ = [
    "OPS",
    "PAGE_BYTES",
    "STATE",
    "RuntimeState",
    "clear_host_pools",
    "extent_bytes",
    "host_bytes_held",
    "host_pool_stats",
    "numa",
    "offload",
    "pending_events",
    "release",
    "reload",
    "reset_stats",
    "stats",
    "streams_for",
    "wait_reload",
]
