"""One unit for every byte figure of a report.

Takes: byte counts. Gives ``ByteUnit`` (a unit's name and its size in
bytes; ``unit(nbytes)`` is the figure with its name, ``unit.number(nbytes)``
the figure alone) and ``unit_for(*figures)``: the largest binary unit that
keeps the largest figure at or above 1 (below 1 KiB: bytes), the unit
``units.format_bytes`` would pick for that figure. A report quotes every
figure in the one unit of its largest, so rows and totals compare at a
glance and none reads as 0.00 of a unit too large for it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["ByteUnit", "UNITS", "unit_for"]


@dataclasses.dataclass(frozen=True)
class ByteUnit:
    name: str
    nbytes: int

    def number(self, nbytes: float) -> str:
        """``nbytes`` in this unit: whole bytes, else two decimals."""
        return f"{nbytes:.0f}" if self.nbytes == 1 else f"{nbytes / self.nbytes:.2f}"

    def __call__(self, nbytes: float) -> str:
        return f"{self.number(nbytes)} {self.name}"

    def __str__(self) -> str:
        return self.name


UNITS = (ByteUnit("B", 1), ByteUnit("KiB", 2**10), ByteUnit("MiB", 2**20), ByteUnit("GiB", 2**30))


def unit_for(*figures: Optional[float]) -> ByteUnit:
    """The unit of the largest of ``figures`` (None ignored; bytes when there are none)."""
    largest = max((abs(f) for f in figures if f is not None), default=0)
    return next((u for u in reversed(UNITS) if largest >= u.nbytes), UNITS[0])
