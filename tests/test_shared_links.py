"""Copy bandwidth with every rank of a host copying at once
(``planning/shared_links.py``), on two CPU ranks (gloo): the measurement is
injected (no GPU here) and records when it ran, so the test sees that the
solo rounds never overlap another rank's rounds and the shared rounds do;
the figures kept are each phase's median, and the shared pair prices the
plans through ``OffloadConfig.bandwidth_gbps``."""

from __future__ import annotations

import datetime
import json
import os
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp

from offload_pass.planning.shared_links import SharedBandwidth, measure_shared_bandwidth

RANKS = 2
ROUND_S = 0.15


def _worker(rank: int, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(RANKS))
    os.environ["LOCAL_WORLD_SIZE"] = str(RANKS)
    dist.init_process_group("gloo", rank=rank, world_size=RANKS, timeout=datetime.timedelta(seconds=60))
    spans, calls = [], []

    def measure():
        start = time.monotonic()
        time.sleep(ROUND_S)
        calls.append(len(calls))
        spans.append((start, time.monotonic()))
        # Figures that tell the rounds apart: alone 3 rounds of 50, 40, 60; together 20, 30, 25.
        solo, shared = [(50.0, 51.0), (40.0, 41.0), (60.0, 61.0)], [(20.0, 21.0), (30.0, 31.0), (25.0, 26.0)]
        n = len(calls) - 1
        return solo[n] if n < 3 else shared[n - 3]

    got = measure_shared_bandwidth(measure=measure)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"spans": spans, "ranks": got.ranks, "solo": got.solo, "shared": got.shared}, f)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _overlap(a, b) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_ranks_measure_alone_in_turn_then_all_at_once(tmp_path):
    mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=RANKS, start_method="spawn")
    results = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(RANKS)]
    for r in results:
        assert r["ranks"] == RANKS and r["solo"] == [50.0, 51.0] and r["shared"] == [25.0, 26.0]  # medians
        assert len(r["spans"]) == 6
    solo = [r["spans"][:3] for r in results]
    shared = [r["spans"][3:] for r in results]
    # Alone: rank 0's three rounds end before rank 1's first begins.
    assert solo[0][-1][1] <= solo[1][0][0]
    assert all(_overlap(a, b) == 0 for a in solo[0] for b in solo[1])
    # Together: each round starts at a barrier, so the ranks' rounds overlap, round by round.
    assert all(_overlap(a, b) > ROUND_S / 2 for a, b in zip(shared[0], shared[1]))


def test_the_shared_figures_price_the_plans():
    from offload_pass.config import OffloadConfig
    from offload_pass.planning.cost_model import device_profile

    got = SharedBandwidth(2, (50.0, 52.0), (24.0, 39.0))
    assert got.share == pytest.approx((0.48, 0.75))
    assert got.describe() == (
        "copies with 2 ranks at once: device->host 24.0 GB/s (48% of 50.0 alone), "
        "host->device 39.0 GB/s (75% of 52.0 alone)"
    )
    config = OffloadConfig(bandwidth_gbps=got.bandwidth_gbps)
    profile = device_profile(torch.device("cpu"), config.bandwidth_gbps)
    assert (profile.d2h_gbps, profile.h2d_gbps) == (24.0, 39.0)
    assert profile.bytes_per_ms("d2h") == 24.0e6 and profile.bytes_per_ms("h2d") == 39.0e6
    # In the compile caches' key: another pair is another plan.
    assert config.cache_key() != OffloadConfig(bandwidth_gbps=(24.0, 40.0)).cache_key()


def test_measuring_needs_the_process_group():
    with pytest.raises(RuntimeError, match="needs torch.distributed initialized"):
        measure_shared_bandwidth(measure=lambda: (1.0, 1.0))


def test_ranks_over_several_hosts_must_name_the_hosts_group(monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"4 ranks over several hosts \(LOCAL_WORLD_SIZE=2\); pass group="):
        measure_shared_bandwidth(measure=lambda: (1.0, 1.0))
    with pytest.raises(ValueError, match="rounds must be an int >= 1, got 0"):
        measure_shared_bandwidth(measure=lambda: (1.0, 1.0), rounds=0)
