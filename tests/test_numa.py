"""The host pool's pinned pages on the GPU's NUMA node (``runtime/numa.py``):
the node read from the driver's and sysfs's records (fake trees here), the
pages bound with mbind on this host's memory, and the pool binding before it
page-locks."""

from __future__ import annotations

import platform
from types import SimpleNamespace

import pytest
import torch

from offload_pass import runtime
from offload_pass.enums import PlacementCode
from offload_pass.runtime import numa

UUID = "4b3f9b5a-1c2d-3e4f-5a6b-7c8d9e0f1a2b"

needs_mbind = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="mbind's call number is known on x86_64 and aarch64"
)


def _host(tmp_path, online="0-1", gpus=(("0000:1B:00.0", "GPU-" + UUID.upper(), "1"),)):
    """A fake /proc and /sys: ``online`` NUMA nodes, and per GPU its PCI
    address, the UUID line the NVIDIA driver writes and sysfs's numa_node."""
    proc, sys_ = tmp_path / "proc", tmp_path / "sys"
    (sys_ / "devices/system/node").mkdir(parents=True)
    (sys_ / "devices/system/node/online").write_text(online + "\n")
    for address, uuid, node in gpus:
        info = proc / "driver/nvidia/gpus" / address
        info.mkdir(parents=True)
        info.joinpath("information").write_text(f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t\t {uuid}\n")
        if node is not None:
            dev = sys_ / "bus/pci/devices" / address.lower()
            dev.mkdir(parents=True)
            dev.joinpath("numa_node").write_text(node + "\n")
    return str(proc), str(sys_)


@pytest.mark.parametrize("text, nodes", [("0", [0]), ("0-1", [0, 1]), ("0,2-3", [0, 2, 3]), (None, [0])])
def test_online_nodes_read_the_kernels_list(tmp_path, text, nodes):
    root = tmp_path / "sys"
    if text is not None:
        (root / "devices/system/node").mkdir(parents=True)
        (root / "devices/system/node/online").write_text(text + "\n")
    assert numa.online_nodes(str(root)) == nodes


@pytest.mark.parametrize(
    "online, gpus, asked, expected",
    [
        # The driver writes "GPU-<hex with dashes>", torch the hex with dashes: the same GPU.
        ("0-1", (("0000:1B:00.0", "GPU-" + UUID, "1"),), UUID, (PlacementCode.PLACED, 1)),
        ("0-1", (("0000:1B:00.0", "GPU-" + UUID.upper(), "0"),), "GPU-" + UUID, (PlacementCode.PLACED, 0)),
        # Two GPUs: the one asked for.
        ("0-1", (("0000:1b:00.0", "GPU-" + "0" * 32, "0"), ("0000:9c:00.0", "GPU-" + UUID, "1")), UUID,
         (PlacementCode.PLACED, 1)),
        ("0", (("0000:1B:00.0", "GPU-" + UUID, "1"),), UUID, (PlacementCode.ONE_NODE, None)),
        ("0-1", (("0000:1B:00.0", "GPU-" + "0" * 32, "1"),), UUID, (PlacementCode.UNKNOWN_DEVICE, None)),
        ("0-1", (("0000:1B:00.0", "GPU-" + UUID, "-1"),), UUID, (PlacementCode.UNKNOWN_DEVICE, None)),
        ("0-1", (("0000:1B:00.0", "GPU-" + UUID, None),), UUID, (PlacementCode.UNKNOWN_DEVICE, None)),
    ],
)
def test_the_gpus_node_comes_from_its_pci_slot(tmp_path, online, gpus, asked, expected):
    proc, sys_ = _host(tmp_path, online, gpus)
    found = numa.device_node(asked, proc, sys_)
    assert (found.code, found.node) == expected
    if found.code is PlacementCode.UNKNOWN_DEVICE:
        assert found.detail and found.detail in found.describe()


def _page_aligned(nbytes):
    raw = torch.empty(nbytes + 4096, dtype=torch.uint8)
    return raw, raw.data_ptr() + (-raw.data_ptr() % 4096)


@needs_mbind
def test_prefer_node_binds_the_pages_it_is_given():
    raw, base = _page_aligned(1 << 20)
    before = numa.policy_of(base)
    assert before is not None and before[0] != numa.MPOL_PREFERRED
    bound = numa.prefer_node(base, 1 << 20, 0)
    assert (bound.code, bound.node) == (PlacementCode.PLACED, 0)
    # Every page of the range, the last included; the page after it untouched.
    assert numa.policy_of(base) == numa.policy_of(base + (1 << 20) - 4096) == (numa.MPOL_PREFERRED, 0)
    # A node the host does not have: said, not raised.
    missing = numa.prefer_node(base, 4096, max(numa.online_nodes()) + 7)
    assert missing.code is PlacementCode.FAILED and "Invalid argument" in missing.describe()
    with pytest.raises(ValueError, match="page boundary"):
        numa.prefer_node(base + 8, 4096, 0)
    del raw


@needs_mbind
def test_a_pinned_pool_buffer_is_bound_to_the_gpus_node_before_it_is_page_locked(monkeypatch):
    # No GPU here: page-locking is faked, and records the policy its pages
    # have when it is called (page-locking touches every page: binding
    # after it would place nothing).
    seen = []

    def register(base, nbytes, flags):
        seen.append((nbytes, numa.policy_of(base), numa.policy_of(base + nbytes - 1)))
        return 0

    monkeypatch.setattr(torch.cuda, "cudart", lambda: SimpleNamespace(cudaHostRegister=register))
    monkeypatch.setattr(runtime.host_pool, "_placement", lambda device: numa.Placement(PlacementCode.PLACED, 0))
    raw, base, node = runtime._page_locked(3 * 4096 + 5, True, torch.device("cuda", 0))
    assert node == 0 and seen == [(3 * 4096 + 5, (numa.MPOL_PREFERRED, 0), (numa.MPOL_PREFERRED, 0))]
    # Where the GPU's node is not known, nothing is bound and nothing is said.
    seen.clear()
    monkeypatch.setattr(
        runtime.host_pool, "_placement", lambda device: numa.Placement(PlacementCode.UNKNOWN_DEVICE, detail="x")
    )
    raw2, base2, node2 = runtime._page_locked(4096, True, torch.device("cuda", 0))
    assert node2 is None and seen[0][1][0] != numa.MPOL_PREFERRED
    # Not pinned, or not for a GPU: never bound.
    assert runtime._page_locked(4096, False, torch.device("cuda", 0))[2] is None
    assert runtime._page_locked(4096, True)[2] is None
    del raw, raw2


@needs_mbind
def test_a_binding_that_fails_is_said_once_and_the_buffer_still_pinned(monkeypatch):
    registered = []
    monkeypatch.setattr(
        torch.cuda, "cudart", lambda: SimpleNamespace(cudaHostRegister=lambda b, n, f: registered.append(n) or 0)
    )
    monkeypatch.setattr(runtime.host_pool, "_placement", lambda device: numa.Placement(PlacementCode.PLACED, 4000))
    monkeypatch.setattr(runtime.STATE, "warned", set())
    with pytest.warns(RuntimeWarning, match="not placed"):
        _, _, node = runtime._page_locked(4096, True, torch.device("cuda", 0))
    assert node is None and registered == [4096]
