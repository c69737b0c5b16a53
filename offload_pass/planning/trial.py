"""One partition with offload planned on it, as the step simulator predicts it.

Takes: a recompute level and the prediction of the step planned on that
level's partition. Gives ``Trial``, plain data: what ``recompute`` chooses
among and what the plan keeps of every partition tried
(``OffloadPlan.recompute_trials``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from offload_pass.units import format_bytes

__all__ = ["Trial"]


@dataclasses.dataclass(frozen=True)
class Trial:
    """One partition with offload planned on it, as the step simulator predicts it."""

    level: Optional[float]  # activation_memory_budget it was partitioned under; None: the default (1.0)
    step_ms: float
    peak: int  # predicted: the memory timeline's peak plus the calibration's peak_offset
    peak_offset: int = 0  # the calibration's offset counted into ``peak``
    copied_bytes: Optional[int] = None  # the bytes its offload plan copies to the host; None: not known

    def peak_at(self, peak_offset: int) -> int:
        """The trial's peak under another calibration's offset: its timeline's
        peak plus ``peak_offset`` (the offload planned on it left as it was)."""
        return self.peak - self.peak_offset + peak_offset

    def describe(self) -> str:
        level = "1.0 (none)" if self.level is None else f"{self.level:g}"
        copied = f", {format_bytes(self.copied_bytes)} copied" if self.copied_bytes else ""
        return f"{level}: {self.step_ms:.2f} ms, {format_bytes(self.peak)}{copied}"
