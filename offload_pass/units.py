"""Units: byte counts as a person reads them."""

from __future__ import annotations

__all__ = ["format_bytes"]


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
