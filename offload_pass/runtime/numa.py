"""Host memory next to the GPU: the NUMA node a CUDA device hangs off, and pages bound to it.

Takes: a CUDA device's UUID (``torch.cuda.get_device_properties(d).uuid``)
and the host's ``/proc`` and ``/sys``. Gives ``device_node(uuid)``: the
NUMA node of the device's PCI slot, None where the host has one node or
neither the driver nor sysfs says (``Placement`` says which); and
``prefer_node(address, nbytes, node)``: the pages of that range allocated on
``node`` when first touched (``mbind`` with ``MPOL_PREFERRED``: another
node's pages where that one is full, never a failed allocation).

Why: on a host of several sockets, a pinned buffer on the far socket's
memory sends every copy over the link between the sockets as well as over
PCIe: copies from two GPUs at once then share that link too (torchtitan
reports about 3 x the device->host bandwidth with NUMA-local pinned memory
on GB200). The host pool binds each of its buffers before page-locking it
(``cudaHostRegister`` touches every page), so its pages land on the GPU's
node. Buffers PyTorch's own pinned allocator makes (copies outside a pool)
are not placed.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import platform
from pathlib import Path
from typing import Optional

from offload_pass.enums import PlacementCode

__all__ = ["Placement", "device_node", "online_nodes", "policy_of", "prefer_node"]

# The Linux system calls, by architecture (asm/unistd.h).
_MBIND = {"x86_64": 237, "aarch64": 235}
_GET_MEMPOLICY = {"x86_64": 239, "aarch64": 236}
MPOL_PREFERRED = 1
_MPOL_MF_MOVE = 1 << 1  # pages already touched move too (those of this process alone)
_MPOL_F_ADDR = 1 << 1
_PAGE = 4096
_WORD_BITS = 64


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a host pool's pages go: ``code`` and, by it, ``node`` or ``detail``."""

    code: PlacementCode
    node: Optional[int] = None
    detail: str = ""

    def describe(self) -> str:
        if self.code is PlacementCode.PLACED:
            return f"pinned host pages on NUMA node {self.node} (the GPU's)"
        if self.code is PlacementCode.ONE_NODE:
            return "one NUMA node: pinned host pages wherever the host puts them"
        return f"pinned host pages not placed ({self.code}: {self.detail})"


def online_nodes(sys_root: str = "/sys") -> list[int]:
    """The NUMA nodes online (``/sys/devices/system/node/online``: "0", "0-1", "0,2-3"); [0] where unknown."""
    try:
        text = Path(sys_root, "devices/system/node/online").read_text().strip()
    except OSError:
        return [0]
    nodes: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        nodes += range(int(low), int(high or low) + 1)
    return nodes or [0]


def _hex(uuid: str) -> str:
    """A GPU UUID as bare lowercase hex: the driver writes ``GPU-4b3f...``, torch the hex with dashes."""
    text = uuid.strip().lower()
    return (text[4:] if text.startswith("gpu-") else text).replace("-", "")


def _pci_address(uuid: str, proc_root: str) -> Optional[str]:
    """The PCI address of the GPU whose UUID is ``uuid``: the NVIDIA driver's
    ``/proc/driver/nvidia/gpus/<address>/information`` holds a ``GPU UUID`` line."""
    want = _hex(uuid)
    base = Path(proc_root, "driver/nvidia/gpus")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return None
    for entry in entries:
        try:
            lines = (entry / "information").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            key, _, value = line.partition(":")
            if key.strip() == "GPU UUID" and _hex(value) == want:
                return entry.name
    return None


def device_node(uuid: str, proc_root: str = "/proc", sys_root: str = "/sys") -> Placement:
    """Where the pinned pages of the GPU with ``uuid`` should go (``Placement``, not yet bound)."""
    if len(online_nodes(sys_root)) < 2:
        return Placement(PlacementCode.ONE_NODE)
    address = _pci_address(uuid, proc_root)
    if address is None:
        return Placement(PlacementCode.UNKNOWN_DEVICE, detail=f"no NVIDIA driver record of GPU {uuid}")
    try:
        node = int(Path(sys_root, "bus/pci/devices", address.lower(), "numa_node").read_text())
    except (OSError, ValueError):
        return Placement(PlacementCode.UNKNOWN_DEVICE, detail=f"no numa_node for PCI {address}")
    if node < 0:
        return Placement(PlacementCode.UNKNOWN_DEVICE, detail=f"PCI {address} has no NUMA node")
    return Placement(PlacementCode.PLACED, node=node)


def _syscall(table: dict[str, int]) -> Optional[int]:
    return table.get(platform.machine())


def _libc() -> ctypes.CDLL:
    """The C library's ``syscall``, with errno kept (one handle per process)."""
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


_LIBC: Optional[ctypes.CDLL] = None


def _mask(node: int) -> tuple[ctypes.Array, int]:
    words = node // _WORD_BITS + 1
    mask = (ctypes.c_ulong * words)()
    mask[node // _WORD_BITS] = 1 << (node % _WORD_BITS)
    return mask, words * _WORD_BITS + 1  # the kernel reads maxnode - 1 bits


def prefer_node(address: int, nbytes: int, node: int) -> Placement:
    """Bind the pages of ``[address, address + nbytes)`` (``address`` on a
    page boundary) to ``node``, preferred: they are allocated there when
    first touched; pages touched before move there (``MPOL_MF_MOVE``)."""
    number = _syscall(_MBIND)
    if number is None:
        return Placement(PlacementCode.UNSUPPORTED, detail=platform.machine())
    if address % _PAGE:
        raise ValueError(f"prefer_node: address {address:#x} is not on a {_PAGE}-byte page boundary")
    mask, maxnode = _mask(node)
    length = -(-nbytes // _PAGE) * _PAGE
    result = _libc().syscall(
        ctypes.c_long(number), ctypes.c_void_p(address), ctypes.c_ulong(length), ctypes.c_int(MPOL_PREFERRED),
        mask, ctypes.c_ulong(maxnode), ctypes.c_uint(_MPOL_MF_MOVE),
    )
    if result != 0:
        return Placement(PlacementCode.FAILED, node=node, detail=os.strerror(ctypes.get_errno()))
    return Placement(PlacementCode.PLACED, node=node)


def policy_of(address: int) -> Optional[tuple[int, int]]:
    """(policy, node) the kernel holds for the page at ``address``
    (``get_mempolicy`` with ``MPOL_F_ADDR``), the lowest node of its mask;
    None where the call is not known here or fails."""
    number = _syscall(_GET_MEMPOLICY)
    if number is None:
        return None
    policy = ctypes.c_int(-1)
    mask = (ctypes.c_ulong * 1)()  # the first 64 nodes
    result = _libc().syscall(
        ctypes.c_long(number), ctypes.byref(policy), mask, ctypes.c_ulong(_WORD_BITS + 1), ctypes.c_void_p(address),
        ctypes.c_ulong(_MPOL_F_ADDR),
    )
    if result != 0:
        return None
    word = mask[0]
    return policy.value, (word & -word).bit_length() - 1 if word else -1
