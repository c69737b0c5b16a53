"""Fitted calibrations kept on disk, so a later run plans from them at its first call.

Takes: a graph's key (``memory.graph_key``), the device, and the carried
form of a calibration (``memory.carry``: its scales). Gives:
``CalibrationStore``: one JSON file per graph and device under torch's
cache directory (``<cache_dir>/offload_pass/calibrations/``), keyed by the
graph's key, the device's name and torch's version, as Inductor keeps its
autotuning results. ``store_for`` gives None where the store is off: off
CUDA, with ``disabled_passes`` naming "calibration_cache", or where
``compile_caches.graph_caches_off`` turned every cache off (tests and
measurements must plan from what their own run measured). A file that does
not read back as a calibration is ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from typing import Optional

import torch

from offload_pass.planning.calibration import Calibration

__all__ = ["ENV_SWITCH", "CalibrationStore", "calibration_dir", "store_for"]

log = logging.getLogger("offload_pass")

# Set to "0" (``compile_caches.graph_caches_off`` does), the store is off for the process.
ENV_SWITCH = "OFFLOAD_PASS_CALIBRATION_CACHE"
_FORMAT = 1


def calibration_dir() -> str:
    """Where the store's files go: under torch's cache directory (``TORCHINDUCTOR_CACHE_DIR``)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return os.path.join(cache_dir(), "offload_pass", "calibrations")


@dataclasses.dataclass(frozen=True)
class CalibrationStore:
    """The calibrations of one device (``device_name``: what the key holds of it)."""

    directory: str
    device_name: str

    def path(self, key: str) -> str:
        digest = hashlib.sha256(f"{key}\n{self.device_name}\n{torch.__version__}".encode()).hexdigest()
        return os.path.join(self.directory, f"{digest}.json")

    def save(self, key: str, calibration: Calibration) -> None:
        """Write ``calibration`` for the graph ``key`` (a failed write is said and left)."""
        fields = dataclasses.asdict(calibration)
        record = {"format": _FORMAT, "key": key, "device": self.device_name, "calibration": fields}
        try:
            os.makedirs(self.directory, exist_ok=True)
            path = self.path(key)
            with open(path + ".tmp", "w") as f:
                json.dump(record, f)
            os.replace(path + ".tmp", path)
        except OSError as error:
            log.info("offload_pass: calibration not kept on disk (%s)", error)

    def load(self, key: str) -> Optional[Calibration]:
        """The calibration kept for the graph ``key`` on this device (None: none, or unreadable)."""
        try:
            with open(self.path(key)) as f:
                record = json.load(f)
            if record.get("format") != _FORMAT or record.get("key") != key or record.get("device") != self.device_name:
                return None
            fields = dict(record["calibration"])
            fields["partition_offsets"] = tuple(tuple(o) for o in fields.get("partition_offsets", ()))
            return Calibration(**fields)
        except (OSError, ValueError, TypeError, KeyError):
            return None


def store_for(device: torch.device, enabled: bool) -> Optional[CalibrationStore]:
    """The store of ``device``'s calibrations; None where it is off (``enabled`` False, off CUDA, or the process switch)."""
    if not enabled or device.type != "cuda" or os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    return CalibrationStore(calibration_dir(), torch.cuda.get_device_name(device))
