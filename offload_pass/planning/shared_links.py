"""Copy bandwidth with every rank of a host copying at once.

Takes: a CUDA device and the process group of the ranks that share this
host (default: every rank, where they all run on it). Gives
``measure_shared_bandwidth``: a ``SharedBandwidth``, each direction's pinned
copy bandwidth measured with this rank copying alone (the others waiting at
a barrier, rank by rank) and with every rank of the group copying at once,
and its ``bandwidth_gbps``, the shared pair to hand ``OffloadConfig`` so
that this rank's plans price copies at what they will get.

Why: the plan hides a copy behind compute only as far as its bandwidth
allows. Ranks on one host share its PCIe switches, root complexes and host
memory; each gets less when all copy at once (an XLA report on a DGX-H100:
13.5 GiB/s each against 33 alone). The profile measured once per device
(``cost_model.device_profile``) times one process alone. A collective: every
rank of the group calls it, at the same point.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from typing import Callable, Optional

import torch

__all__ = ["SharedBandwidth", "measure_shared_bandwidth"]

# Rounds of each measurement; the median is kept.
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class SharedBandwidth:
    """GB/s (1e9 bytes) of this rank's pinned copies, device->host and host->device."""

    ranks: int  # ranks that copied at once
    solo: tuple[float, float]  # this rank copying alone
    shared: tuple[float, float]  # every rank of the group copying at once

    @property
    def share(self) -> tuple[float, float]:
        """Shared over solo, per direction (1.0: the links are not shared, or wide enough for all)."""
        return self.shared[0] / self.solo[0], self.shared[1] / self.solo[1]

    @property
    def bandwidth_gbps(self) -> tuple[float, float]:
        """``OffloadConfig.bandwidth_gbps`` for this rank's plans: the shared figures."""
        return self.shared

    def describe(self) -> str:
        d2h, h2d = self.share
        return (
            f"copies with {self.ranks} rank{'s' if self.ranks != 1 else ''} at once: device->host {self.shared[0]:.1f} GB/s "
            f"({d2h:.0%} of {self.solo[0]:.1f} alone), host->device {self.shared[1]:.1f} GB/s "
            f"({h2d:.0%} of {self.solo[1]:.1f} alone)"
        )


def _median(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def _local_group_check(group) -> None:
    """Where no group is given, every rank must run on this host (else the
    world's ranks do not share its links: pass the host's group)."""
    local, world = os.environ.get("LOCAL_WORLD_SIZE"), torch.distributed.get_world_size()
    if group is None and local is not None and int(local) != world:
        raise ValueError(
            f"measure_shared_bandwidth: {world} ranks over several hosts (LOCAL_WORLD_SIZE={local}); "
            "pass group=, the ranks of this host (torch.distributed.new_subgroups())"
        )


def measure_shared_bandwidth(
    device: Optional[torch.device] = None,
    group=None,
    rounds: int = ROUNDS,
    measure: Optional[Callable[[], tuple[float, float]]] = None,
) -> SharedBandwidth:
    """This rank's copy bandwidth alone and with every rank of ``group``
    copying at once (``SharedBandwidth``): alone, the ranks take turns, the
    others at a barrier; together, each round starts at a barrier. Every
    rank of ``group`` calls it. ``device``: this rank's GPU (default: the
    current one). ``measure``: one round's (device->host, host->device)
    GB/s (default ``cost_model.copy_gbps`` on ``device``)."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("measure_shared_bandwidth needs torch.distributed initialized (init_process_group)")
    if rounds < 1:
        raise ValueError(f"measure_shared_bandwidth: rounds must be an int >= 1, got {rounds!r}")
    _local_group_check(group)
    if measure is None:
        from offload_pass.planning.cost_model import copy_gbps

        if device is None:
            if not torch.cuda.is_available():
                raise RuntimeError("measure_shared_bandwidth measures pinned copies to a CUDA device; none here")
            device = torch.device("cuda", torch.cuda.current_device())
        measure = lambda: copy_gbps(device)  # noqa: E731
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    solo: list[tuple[float, float]] = []
    for turn in range(size):
        dist.barrier(group)
        if turn == rank:
            solo = [measure() for _ in range(rounds)]
    shared = []
    for _ in range(rounds):
        dist.barrier(group)
        shared.append(measure())
    dist.barrier(group)
    return SharedBandwidth(size, _median(solo), _median(shared))
