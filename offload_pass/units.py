"""Units: byte counts as a person reads them, and sizes that may be symbolic."""

from __future__ import annotations

from typing import Optional

__all__ = ["MIB", "format_bytes", "hint", "mib", "size_hint"]

MIB = 2**20


def format_bytes(nbytes: float) -> str:
    """``format_bytes(3 * 2**20) == "3.00 MiB"``: the largest binary unit
    that keeps the number at or above 1 (bytes below 1 KiB stay bytes), so a
    small model's figures never read as 0.00 MiB."""
    sign = "-" if nbytes < 0 else ""
    value = abs(float(nbytes))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{sign}{value:.0f} B" if unit == "B" else f"{sign}{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def mib(nbytes: float) -> float:
    """Bytes in MiB, for tables and logs with a fixed unit."""
    return nbytes / MIB


def size_hint(size: object) -> Optional[int]:
    """A size as an int, a symbolic one by its hint: reading it never adds a
    guard, so a dynamic graph is not specialized by being estimated. None for
    a symbolic size without a hint."""
    if isinstance(size, int):
        return size
    value = getattr(getattr(size, "node", None), "hint", None)
    return int(value) if isinstance(value, int) else None


def hint(size: object) -> int:
    """``size_hint`` that raises for a size without a hint."""
    value = size_hint(size)
    if value is None:
        raise ValueError(f"symbolic size {size} without a hint")
    return value
