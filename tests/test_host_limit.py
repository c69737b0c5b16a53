"""The pinned host memory a plan may hold: given, defaulted to a share of the
host's available memory, or none for a plan made for another device; the
copies past it kept on the device, the latest produced first, each saying
why, and training exactly as plain Inductor's."""

import pytest
import torch

import offload_pass
from offload_pass.enums import Decision
from offload_pass.examples.models import make_decoder
from offload_pass.planning import host_limit
from offload_pass.planning.host_limit import HOST_SHARE, HostLimit, LimitSource, resolve_host_limit
from offload_pass.planning.reasons import Reason

from helpers import assert_same_training

ATTN_MLP = lambda m: offload_pass.offload_modules(m, "layers.*.attn", "layers.*.mlp")
GIB = 1 << 30


@pytest.mark.parametrize(
    "given, for_this_host, available, want",
    [
        (1000, True, 8 * GIB, HostLimit(1000, LimitSource.GIVEN)),
        (0, True, 8 * GIB, HostLimit(0, LimitSource.GIVEN)),
        (1000, False, None, HostLimit(1000, LimitSource.GIVEN)),  # given: whatever the host
        (None, True, 8 * GIB, HostLimit(int(8 * GIB * HOST_SHARE), LimitSource.DEFAULT, 8 * GIB)),
        (None, True, None, HostLimit(None, LimitSource.NONE)),  # the host's memory not known
        (None, False, 8 * GIB, HostLimit(None, LimitSource.NONE)),  # planned for a named device profile
    ],
)
def test_the_limit_resolves_from_the_config_then_the_host(monkeypatch, given, for_this_host, available, want):
    monkeypatch.setattr(host_limit, "host_available_bytes", lambda: available)
    assert resolve_host_limit(given, for_this_host) == want
    # Only a given limit is checked at run time (a default in the graph's code would defeat Inductor's caches).
    assert want.runtime_cap == (want.bytes if want.source == LimitSource.GIVEN else -1)


@pytest.mark.parametrize("ranks, want", [(None, 1), ("4", 4), ("0", 1), ("x", 1)])
def test_the_default_is_split_over_the_ranks_on_this_host(monkeypatch, ranks, want):
    if ranks is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", ranks)
    monkeypatch.setattr(host_limit, "host_available_bytes", lambda: 8 * GIB)
    assert host_limit.local_ranks() == want
    assert resolve_host_limit(None, True).bytes == int(8 * GIB * HOST_SHARE / want)
    assert resolve_host_limit(1000, True).bytes == 1000  # a given limit is the user's, whatever the ranks


def test_a_replan_keeps_the_limit_its_prior_plan_was_cut_to(monkeypatch):
    from types import SimpleNamespace

    from offload_pass.config import OffloadConfig
    from offload_pass.pipeline.passes import PassContext, with_host_limit

    monkeypatch.setattr(host_limit, "host_available_bytes", lambda: 8 * GIB)
    ctx = PassContext(OffloadConfig(), None, (), {}, "graph 0", "", None, False)
    first = with_host_limit(ctx).host_limit
    assert first == HostLimit(int(8 * GIB * HOST_SHARE), LimitSource.DEFAULT, 8 * GIB)
    # The host reads less once the first plan's copies are pinned: the re-plan keeps the first limit.
    monkeypatch.setattr(host_limit, "host_available_bytes", lambda: 5 * GIB)
    replan = PassContext(OffloadConfig(), None, (), {}, "graph 0", "", None, False, prior=SimpleNamespace(host_limit=first))
    assert with_host_limit(replan).host_limit == first
    assert with_host_limit(ctx).host_limit.bytes == int(5 * GIB * HOST_SHARE)  # a first compile reads the host


def test_this_host_reports_its_available_memory():
    available = host_limit.host_available_bytes()
    assert available is not None and 0 < available


def _offloaded(backend):
    return [(e.name, e.nbytes) for p in backend.plans for e in p.entries if e.decision == Decision.OFFLOAD]


def _kept_for_host(backend):
    return [e for p in backend.plans for e in p.entries if e.code == Reason.HOST_LIMIT]


def _train(limit=None, **config):
    torch.manual_seed(0)
    x = torch.randn(2, 16, 32)
    return assert_same_training(make_decoder(layers=2, hidden=32, heads=4), ATTN_MLP, (x,), host_memory_limit=limit, **config)


def test_a_given_limit_keeps_the_latest_copies_and_trains_exactly():
    free = _train()
    plan = free.plans[0]
    assert not _kept_for_host(free) and plan.groups
    sizes = [g.nbytes for g in plan.groups]  # in the order the forward produces them
    limit = sum(sizes) // 2
    torch._dynamo.reset()
    capped = _train(limit)
    kept_plan = capped.plans[0]
    assert kept_plan.host_limit == HostLimit(limit, LimitSource.GIVEN)
    assert kept_plan.offloaded_bytes <= limit
    # Exactly the longest prefix of the forward's copies within the limit goes to the host.
    prefix, total = 0, 0
    while total + sizes[prefix] <= limit:
        total += sizes[prefix]
        prefix += 1
    assert [g.storage for g in kept_plan.groups] == [g.storage for g in plan.groups][:prefix]
    kept = _kept_for_host(capped)
    moved = {m for g in plan.groups[prefix:] for m in g.members}
    assert {e.name for e in kept} == moved
    assert all(e.decision == Decision.KEEP and dict(e.detail)["limit"] == limit for e in kept)
    assert kept[0].reason.endswith("(host_memory_limit)"), kept[0].reason


def test_the_default_limit_is_a_share_of_the_available_memory_and_says_so(monkeypatch):
    free = _train()
    offloaded = free.plans[0].offloaded_bytes
    available = int(offloaded / HOST_SHARE * 0.6)  # the default: 60 % of what the plan would pin
    monkeypatch.setattr(host_limit, "host_available_bytes", lambda: available)
    torch._dynamo.reset()
    capped = _train()
    assert capped.plans[0].offloaded_bytes <= int(available * HOST_SHARE) < offloaded
    kept = _kept_for_host(capped)
    assert kept and all(dict(e.detail)["source"] == LimitSource.DEFAULT for e in kept)
    assert f"{HOST_SHARE:.0%} of the" in kept[0].reason and "set host_memory_limit" in kept[0].reason, kept[0].reason


def test_a_zero_limit_offloads_nothing_and_trains_exactly():
    capped = _train(0)
    assert not _offloaded(capped)
    assert _kept_for_host(capped)
