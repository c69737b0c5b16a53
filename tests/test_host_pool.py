"""Host pools: one buffer per graph call, sized by the plan, reused every step,
and never a slot written while a copy in it may still be read."""

import copy
import dataclasses
import warnings

import pytest
import torch

import offload_pass
from offload_pass import runtime
from offload_pass.examples.models import make_decoder
from offload_pass.planning.plan_render import plan_unit
from offload_pass.rewriting.rewrite import host_pool_layout

from helpers import DEVICES
from helpers import assert_same_training

ATTN_MLP = lambda m: offload_pass.offload_modules(m, "layers.*.attn", "layers.*.mlp")


@pytest.fixture(autouse=True)
def _empty_pools():
    runtime.clear_host_pools()
    yield
    runtime.clear_host_pools()


def pools_since(before):
    """Host-pool stats relative to ``before`` (buffers another test still
    holds stay out of the comparison), without the bytes bound to the GPU's
    NUMA node (``on_gpu_node`` checks those)."""
    now = runtime.host_pool_stats()
    return {k: now[k] - before[k] for k in now if k != "bytes_on_gpu_node"}


def on_gpu_node(before, device):
    """The bytes of the pools made since ``before`` bound to the GPU's NUMA
    node, and the bytes expected there: every pinned pool's where the host
    knows the GPU's node (``runtime.numa``), else none."""
    now = runtime.host_pool_stats()
    placed = device == "cuda" and runtime.STATE.placements[0].code is runtime.numa.PlacementCode.PLACED
    return now["bytes_on_gpu_node"] - before["bytes_on_gpu_node"], (now["bytes"] - before["bytes"]) * placed


def decoder(device="cpu"):
    return make_decoder(layers=2, hidden=32, heads=4, device=device)


def test_layout_aligns_slots_and_skips_unknown_sizes():
    key, total, slots = host_pool_layout([("a", 10), ("b", None), ("c", 5000), ("d", 4096)])
    assert slots == {"a": (0, 4096), "c": (4096, 8192), "d": (12288, 4096)}
    assert total == 16384
    # The key is the layout's, not the names': like layouts may share buffers.
    assert host_pool_layout([("x", 4000), ("y", 5000), ("z", 4096)])[0] == key
    assert host_pool_layout([("x", 5000), ("y", 4000), ("z", 4096)])[0] != key
    assert host_pool_layout([("a", None)]) == ("", 0, {})


@pytest.mark.parametrize("device", DEVICES)
def test_pool_is_sized_by_the_plan_and_reused_every_step(device):
    x = torch.randn(2, 16, 32, device=device)
    before = runtime.host_pool_stats()
    backend = assert_same_training(decoder(device), ATTN_MLP, (x,), steps=3)
    plan = backend.plans[-1]
    pool_bytes, slots = plan.host_pool
    copied = [n for n in backend.records[-1].graphs.forward.splitlines() if "offload_pass.offload(" in n]
    assert slots == len(copied) == len(plan.groups) > 0
    # Exactly the copies' bytes (dense here), each rounded up to a page: no
    # power-of-two rounding.
    assert pool_bytes == sum(-(-g.nbytes // 4096) * 4096 for g in plan.groups)
    assert f"host pool {plan_unit(plan)(pool_bytes)} per call ({slots} slots" in str(plan)
    # Three steps, one buffer; nothing held once each backward is done.
    assert pools_since(before) == {"arenas": 1, "bytes": pool_bytes, "in_use": 0}
    got, expected = on_gpu_node(before, device)
    assert got == expected


@pytest.mark.parametrize("device", DEVICES)
def test_two_forwards_before_one_backward_take_a_second_buffer(device):
    model = decoder(device)
    reference = copy.deepcopy(model)
    ATTN_MLP(model)
    backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 16, 32, device=device)
    before = runtime.host_pool_stats()
    loss = compiled(x) + compiled(2 * x)
    # The first call's copies are still held by autograd: the second call
    # must not write over them.
    plan = backend.plans[-1]
    assert pools_since(before) == {"arenas": 2, "bytes": 2 * plan.host_pool[0], "in_use": 2 * plan.offloaded_bytes}
    loss.backward()
    assert pools_since(before)["in_use"] == 0
    ref = torch.compile(reference)
    (ref(x) + ref(2 * x)).backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_slot_stays_taken_while_any_tensor_shares_its_storage():
    x = torch.randn(64, 64)
    before = runtime.host_pool_stats()
    first = runtime.offload(x, False, -1, "k", 16384, 0, 16384)
    # Autograd may keep a different tensor object over the same storage: the
    # slot must count as taken until the storage itself is gone.
    alias = first.detach()
    del first
    second = runtime.offload(x + 1, False, -1, "k", 16384, 0, 16384)
    assert pools_since(before)["arenas"] == 2
    assert torch.equal(alias, x) and torch.equal(second, x + 1)
    del alias, second
    third = runtime.offload(x + 2, False, -1, "k", 16384, 0, 16384)
    assert pools_since(before)["arenas"] == 2  # a free slot is reused
    assert torch.equal(third, x + 2)
    # A view, or a bare storage handle, holds the slot as well.
    row, storage = third[1:], third.untyped_storage()
    del third
    fourth = runtime.offload(x + 3, False, -1, "k", 16384, 0, 16384)
    assert pools_since(before)["arenas"] == 2 and pools_since(before)["in_use"] == 2 * 16384
    del fourth, row
    # The storage handle alone still holds the first buffer's slot.
    fifth = runtime.offload(x + 4, False, -1, "k", 16384, 0, 16384)
    assert pools_since(before) == {"arenas": 2, "bytes": 2 * 16384, "in_use": 2 * 16384}
    assert fifth.data_ptr() != storage.data_ptr()
    assert torch.equal(fifth, x + 4)
    del storage
    assert pools_since(before)["in_use"] == 16384
    del fifth
    assert pools_since(before)["in_use"] == 0


def test_a_copy_that_outgrows_a_slot_used_before_is_refused_with_the_reason():
    before = runtime.host_pool_stats()
    runtime.offload(torch.randn(64, 64), False, -1, "k", 16384, 0, 16384)  # the slot's first use, freed
    with pytest.raises(ValueError, match=r"32768 bytes does not fit its host-pool slot \[0, 16384\)") as refused:
        runtime.offload(torch.randn(128, 64), False, -1, "k", 16384, 0, 16384)
    # The refusal (its traceback still held here) leaves the slot free.
    assert refused.value is not None and pools_since(before) == {"arenas": 1, "bytes": 16384, "in_use": 0}
    again = runtime.offload(torch.randn(64, 64), False, -1, "k", 16384, 0, 16384)
    assert pools_since(before) == {"arenas": 1, "bytes": 16384, "in_use": 16384}
    del again


def test_bytes_held_are_those_of_the_copy_in_the_slot_now():
    # Layouts with the same page-rounded slots share a key: one slot may
    # hold copies of other sizes from call to call.
    before = runtime.host_pool_stats()
    small = runtime.offload(torch.randn(25), False, -1, "k", 4096, 0, 4096)
    assert pools_since(before)["in_use"] == 100
    del small
    large = runtime.offload(torch.randn(1000), False, -1, "k", 4096, 0, 4096)
    assert pools_since(before) == {"arenas": 1, "bytes": 4096, "in_use": 4000}
    del large


def test_a_copy_that_outgrows_its_slot_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"16384 bytes does not fit its host-pool slot \[8192, 12288\)"):
        runtime.offload(torch.randn(64, 64), False, -1, "k", 16384, 8192, 4096)


def test_pool_unavailable_falls_back_to_one_allocation_per_copy(monkeypatch):
    tries = []

    def failing(nbytes, pin, device):
        tries.append(nbytes)
        raise RuntimeError("cudaHostRegister failed (simulated)")

    monkeypatch.setattr(runtime.host_pool, "_page_locked", failing)
    runtime.reset_stats()
    before = runtime.host_pool_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_same_training(decoder(), ATTN_MLP, (torch.randn(2, 16, 32),), steps=2)
    assert runtime.stats()["offload_calls"] > 0 and runtime.stats()["fallback_calls"] == 0
    assert pools_since(before)["arenas"] == 0
    messages = {str(w.message) for w in caught if "host pool" in str(w.message)}
    assert len(messages) == 1 and "copies are allocated one by one" in messages.pop()
    # Tried once, not on every copy of every step.
    assert len(tries) == 1


def test_host_pool_can_be_disabled_by_name():
    before = runtime.host_pool_stats()
    backend = assert_same_training(
        decoder(), ATTN_MLP, (torch.randn(2, 16, 32),), steps=2, disabled_passes=("host_pool",)
    )
    plan = backend.plans[-1]
    assert plan.groups and plan.host_pool is None and "host pool" not in str(plan)
    offloads = [n for n in backend.records[-1].graphs.forward.splitlines() if "offload_pass.offload(" in n]
    assert offloads and all(", True, -1)" in n for n in offloads)
    assert pools_since(before)["arenas"] == 0


def test_state_reset_returns_to_a_fresh_import_and_spares_held_slots():
    state = runtime.RuntimeState()
    state.stats["offload_calls"] = 3
    state.host_bytes, state.cuda_available = 123, True
    state.warned.add("w")
    state.copy_out_events[1] = state.reload_events[2] = state.slot_reads[3] = None
    state.unreleased_hosts.add(4)
    state.unavailable.add(("k", False))
    state.slot_addresses.add(5)
    state.streams[0] = None
    state.placements[0] = runtime.numa.Placement(runtime.numa.PlacementCode.ONE_NODE)
    raw, base, _ = runtime._page_locked(8192, False)
    arena = runtime.arena.Arena(raw, base, 8192, False, {})
    state.pools[("k", False)] = [arena]
    copy = torch.empty(16)
    arena.slots[0] = (copy.untyped_storage()._weak_ref(), 64)
    # A copy still in a slot: its buffer must not be freed under it.
    with pytest.raises(RuntimeError, match="hold 64 bytes of host-pool slots"):
        state.reset()
    assert state.pools and state.stats["offload_calls"] == 3
    del copy
    state.reset()
    assert state.generation == 1
    assert dataclasses.replace(state, generation=0) == runtime.RuntimeState()
    # A copy made before the last reset was counted in a total that is gone:
    # freeing it leaves the new total alone.
    held = runtime.STATE.host_bytes
    runtime.host_pool._held(runtime.STATE.generation - 1, 100)
    assert runtime.STATE.host_bytes == held
