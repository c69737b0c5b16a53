"""Named device profiles: plan for a GPU without one at hand.

Takes: a name. Gives: ``named_profile(name)``, the ``DeviceProfile`` the cost
model prices a graph with (``PassContext.profile``), and
``device_memory(name)``, that device's memory in bytes. ``PROFILE_NAMES``
lists the names. "measured" is the profile ``cost_model.device_profile``
measured and cached on a GPU this machine ran (``measured:<device name>``
picks one where several are cached).

The H200's figures were measured with ``cost_model``'s own measurement on
an NVIDIA H200 (torch 2.11.0+cu130), the middle of three rounds; the copy
bandwidths agree with every H200 run in ``benchmarks/results/*.json``
("bandwidth_gbps": 54.7 to 55.5 GB/s each way). The H100's figures are the
H200's where the two share a part (the same compute die and the same PCIe
Gen5 host link) and the H200's measured share of its datasheet figure
applied to the H100's datasheet where they differ (HBM3 at 3.35 TB/s
against the H200's HBM3e at 4.8 TB/s; 80 GB against 141 GB).
"""

from __future__ import annotations

import json

from offload_pass.planning.cost_model import _PROFILE_VERSION, DeviceProfile, _cache_path

__all__ = ["DEVICE_MEMORY", "PROFILE_NAMES", "device_memory", "named_profile"]

# cost_model's measurement on an H200: pinned copies 55.3 / 55.5 GB/s
# (benchmarks/results: 54.7-55.5), a 4096^3 matmul at 815 bf16 / 784 fp16 /
# 51.5 fp32 TFLOP/s (datasheet, dense: 989 / 989 / 67), a device-to-device
# copy at 4180 GB/s read + write (datasheet 4800), 7-9 us to issue a small
# kernel from the host (8.5 kept). launch_us is cost_model's fixed floor.
_H200 = DeviceProfile(
    d2h_gbps=55.3, h2d_gbps=55.5,
    matmul_tflops={"bfloat16": 815.0, "float16": 784.0, "float32": 51.5},
    memory_gbps=4180.0, launch_us=5.0, source="named h200 (measured on an NVIDIA H200)", host_launch_us=8.5,
)

# H100 SXM: the H200's compute die and host link, so its matmul, copy and
# launch figures; memory bandwidth 3350 GB/s (datasheet) x 0.87 (the H200's
# measured 4180 of its 4800).
_H100 = DeviceProfile(
    d2h_gbps=55.3, h2d_gbps=55.5,
    matmul_tflops={"bfloat16": 815.0, "float16": 784.0, "float32": 51.5},
    memory_gbps=2920.0, launch_us=5.0, source="named h100 (H200 measurements, H100 SXM datasheet memory)",
    host_launch_us=8.5,
)

_PROFILES = {"h100": _H100, "h200": _H200}

# Bytes of device memory: the H200's as torch.cuda reported it (140 GiB
# usable of 141 GB); the H100 80 GB's as torch.cuda reports it (79.6 GiB).
DEVICE_MEMORY = {"h100": 85_520_809_984, "h200": 150_109_880_320}

PROFILE_NAMES = (*sorted(_PROFILES), "measured")


def _valid() -> str:
    return ", ".join(repr(n) for n in PROFILE_NAMES) + " or 'measured:<device name>'"


def named_profile(name: str) -> DeviceProfile:
    """The ``DeviceProfile`` called ``name`` ("h100", "h200", "measured",
    "measured:<device name>"); ValueError naming the valid names otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"named_profile: name must be a string ({_valid()}), got {type(name).__name__}")
    key = name.strip().lower()
    if key in _PROFILES:
        return _PROFILES[key]
    if key == "measured" or key.startswith("measured:"):
        return _measured(name.strip().partition(":")[2].strip() or None)
    raise ValueError(f"named_profile: no device profile named {name!r}; valid: {_valid()}")


def device_memory(name: str) -> int | None:
    """Bytes of memory of the device ``name`` names (None: a measured profile, whose size is not cached)."""
    named_profile(name)
    return DEVICE_MEMORY.get(name.strip().lower())


def _measured(device: str | None) -> DeviceProfile:
    """The profile cost_model cached for ``device`` (None: the only one
    cached for this profile version, preferring this torch's)."""
    import torch

    path = _cache_path()
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    entries = {}
    for key, fields in table.items():
        parts = [p.strip() for p in key.split("|")]
        if len(parts) == 3 and parts[2] == f"v{_PROFILE_VERSION}":
            entries.setdefault(parts[0], []).append((parts[1] == f"torch {torch.__version__}", key, fields))
    if device is not None:
        entries = {k: v for k, v in entries.items() if k.lower() == device.lower()}
    if len(entries) != 1:
        found = ", ".join(sorted(entries)) or "none"
        raise ValueError(
            f"named_profile: 'measured' needs exactly one device profile cached in {path} (found: {found}); "
            "compile on a GPU once to measure one, name one with 'measured:<device name>', or use 'h100' / 'h200'"
        )
    _, key, fields = max(next(iter(entries.values())), key=lambda e: e[0])
    return DeviceProfile(**{**fields, "source": f"cache {path} ({key})"})
