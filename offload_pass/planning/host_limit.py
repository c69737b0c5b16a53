"""How much pinned host memory a plan may hold, and the plan cut to it.

Takes: the config (``OffloadConfig.host_memory_limit``), whether the plan is
made for this host (not for a named device profile's), and a plan. Gives
``HostLimit`` (the bytes, where they came from, what the host had
available), ``resolve_host_limit`` (computed once per compile, before the
first partition is planned) and ``fit_to_host`` (the plan with the copies
past the limit kept on the device, each saying so).

Why a default: offloaded copies live in pinned (page-locked) host memory,
which the kernel cannot swap out. A plan that pins more than the host can
spare ends the process, or the host, with the out-of-memory killer, not
with an error a person can read. Unless the user gives a limit, a plan
pins at most ``HOST_SHARE`` of the memory the host has available when
the graph is compiled: the rest is left to the data loader, the optimizer
state a user may offload, other ranks on the same host and the page cache.
A plan made for a named device profile (offline planning) is not limited
by this host: the host it will run on is not known.

Which copies stay: the latest produced first. Every copy is off the device
from its forward to its backward, so at the step's peak (between them)
each byte counts alike; an earlier one is off the device longer, and holds
the host no longer than its own reload allows.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from offload_pass.enums import Word
from offload_pass.planning.offload_plan import OffloadPlan
from offload_pass.planning.plan import keep_groups
from offload_pass.planning.reasons import Reason, detail

__all__ = [
    "HOST_SHARE", "HostLimit", "LimitSource", "fit_to_host", "host_available_bytes", "local_ranks", "resolve_host_limit",
]

# The share of the host's available memory a plan may pin by default.
HOST_SHARE = 0.5


class LimitSource(Word):
    """Where a plan's host memory limit came from."""

    GIVEN = "given"  # OffloadConfig.host_memory_limit
    DEFAULT = "default"  # HOST_SHARE of the memory the host had available
    NONE = "none"  # not limited: planned for a named device profile, or the host's memory is not known


@dataclasses.dataclass(frozen=True)
class HostLimit:
    """The pinned host bytes a plan may hold (None: no limit), from ``source``;
    ``available``: the host's available bytes it was computed from (DEFAULT)."""

    bytes: Optional[int]
    source: LimitSource
    available: Optional[int] = None

    @property
    def runtime_cap(self) -> int:
        """The cap the offload op checks as it runs, over every graph's copies
        together (-1: none): a given limit only. The default is a figure of
        this host at this moment; in the graph's code it would make each
        compile's code differ, and Inductor's caches miss."""
        return self.bytes if self.source == LimitSource.GIVEN else -1


def host_available_bytes() -> Optional[int]:
    """The bytes of memory this host has available now (Linux: MemAvailable,
    which counts reclaimable page cache; elsewhere the free pages); None
    where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def resolve_host_limit(given: Optional[int], for_this_host: bool) -> HostLimit:
    """The limit a compile plans under: ``given`` (the config's), else
    ``HOST_SHARE`` of this host's available memory split over the ranks on
    this host (``local_ranks``), else none (planning for a named device
    profile, or the available memory unknown)."""
    if given is not None:
        return HostLimit(given, LimitSource.GIVEN)
    available = host_available_bytes() if for_this_host else None
    if available is None:
        return HostLimit(None, LimitSource.NONE)
    return HostLimit(int(available * HOST_SHARE / local_ranks()), LimitSource.DEFAULT, available)


def local_ranks() -> int:
    """The processes training on this host (torchrun's ``LOCAL_WORLD_SIZE``;
    1 where unset or not a positive int): each takes its share of the default."""
    try:
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return 1
    return ranks if ranks > 0 else 1


def fit_to_host(plan: OffloadPlan, limit: Optional[HostLimit]) -> OffloadPlan:
    """``plan`` with its latest-produced copies kept on the device until the
    bytes it offloads are within ``limit`` (each kept entry's reason:
    ``Reason.HOST_LIMIT``, with the limit, its source and the host's
    available bytes); ``plan`` itself where it fits."""
    if limit is None or limit.bytes is None or plan.offloaded_bytes <= limit.bytes:
        return plan
    total, kept = plan.offloaded_bytes, set()
    for group in reversed(plan.groups):
        if total <= limit.bytes:
            break
        kept.add(group.storage)
        total -= group.nbytes
    share = limit.bytes / limit.available if limit.available else HOST_SHARE  # this rank's share
    values = detail(limit=limit.bytes, source=limit.source, available=limit.available, share=share)
    return keep_groups(plan, kept, Reason.HOST_LIMIT, values)
