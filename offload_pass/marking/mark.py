"""The mark: what one marked module or region asks, as a value.

Takes: the roles and mode the marking API validated, and where the mark came
from. Gives: a frozen ``Mark``, made here and nowhere else, and the plain
dict it travels as in ``node.meta["custom"][MARK_KEY]`` (``to_custom`` /
``from_custom``).

The dict stays: Dynamo takes the argument of ``torch.fx.traceback.annotate``
as a Python constant and cannot do that for a dataclass ("can't reconstruct
arbitrary frozen dataclass instances"), and ``annotations.marks_digest``
hashes the ``repr`` of what lies there for cache keys, so it must be plain,
picklable and repr-stable. The dict's keys are the fields that are set:
"offload" / "keep" (roles), "source", and for a module mark "qualname" and
"outer" (dicts of the enclosing module marks, innermost first), for a region
entered eagerly "where".
"""

from __future__ import annotations

import dataclasses
from typing import Optional

__all__ = ["ALL_ROLES", "Mark", "display_name"]

# The roles of a mark that covers every tensor, whatever its sub-op role.
ALL_ROLES = ("*",)


def display_name(name: str) -> str:
    """A module's qualified name for messages: the root has none."""
    return name if name else "<root>"


@dataclasses.dataclass(frozen=True)
class Mark:
    """A module or region mark. ``offload`` / ``keep``: the roles it offloads
    or keeps (``ALL_ROLES`` for all of them), None where it says nothing."""

    offload: Optional[tuple[str, ...]] = None
    keep: Optional[tuple[str, ...]] = None
    source: str = "mark"  # for messages and plans: "module layers.0", "offload_region(...)"
    qualname: Optional[str] = None  # a module mark's module, named from the root last marked
    outer: tuple["Mark", ...] = ()  # marks of the enclosing marked modules, innermost first
    where: Optional[str] = None  # a region entered eagerly: "file:line in function"

    @classmethod
    def for_module(cls, name: str) -> "Mark":
        """The mark of module ``name`` before any roles are added."""
        return cls(source=f"module {display_name(name)}")

    @classmethod
    def for_region(cls, enabled: bool, roles: tuple[str, ...], where: Optional[str] = None) -> "Mark":
        """The mark of ``offload_region(enabled, roles)``, opened at ``where``
        when entered eagerly (None while Dynamo traces it)."""
        source = f"offload_region(enabled={enabled})"
        if where is not None:
            source = f"{source} at {where}"
        return cls(
            offload=roles if enabled else None,
            keep=None if enabled else roles,
            source=source,
            where=where,
        )

    def adding(self, mode: str, roles: tuple[str, ...]) -> "Mark":
        """This mark with ``roles`` added to ``mode`` ("offload" or "keep")."""
        previous = getattr(self, mode)
        if previous is None or previous == ALL_ROLES or roles == ALL_ROLES:
            merged = ALL_ROLES if ALL_ROLES in (previous, roles) else roles
        else:
            merged = tuple(sorted(set(previous) | set(roles)))
        return dataclasses.replace(self, **{mode: merged})

    def placed(self, qualname: str, outer: tuple["Mark", ...]) -> "Mark":
        """This module mark as installed on module ``qualname`` under ``outer``."""
        return dataclasses.replace(self, qualname=qualname, outer=outer)

    def to_custom(self) -> dict:
        """The plain dict this mark travels as in ``node.meta["custom"]``."""
        custom: dict = {}
        if self.offload is not None:
            custom["offload"] = self.offload
        if self.keep is not None:
            custom["keep"] = self.keep
        custom["source"] = self.source
        if self.qualname is not None:
            custom["qualname"] = self.qualname
        if self.qualname is not None or self.outer:
            custom["outer"] = tuple(m.to_custom() for m in self.outer)
        if self.where is not None:
            custom["where"] = self.where
        return custom

    @classmethod
    def from_custom(cls, custom: dict) -> "Mark":
        """The mark a ``to_custom`` dict (as Dynamo copied it) stands for."""
        def roles(key: str) -> Optional[tuple[str, ...]]:
            value = custom.get(key)
            return tuple(value) if value is not None else None

        qualname, where = custom.get("qualname"), custom.get("where")
        return cls(
            offload=roles("offload"),
            keep=roles("keep"),
            source=str(custom.get("source", "mark")),
            qualname=str(qualname) if qualname is not None else None,
            outer=tuple(cls.from_custom(m) for m in custom.get("outer", ()) if isinstance(m, dict)),
            where=str(where) if where is not None else None,
        )
