"""Role registry for fused multi-output ops.

Takes: a fused op and a map from its input / output positions to sub-op role
names (``register_saved_roles``). Gives: ``roles_of(target)``, used by the plan
stage to attribute each saved tensor of a fused op to its own sub-op, so that
markers with ``roles=`` select tensor by tensor instead of the op as a whole.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import torch

__all__ = ["register_saved_roles", "roles_of", "FusedRoles"]


@dataclasses.dataclass(frozen=True)
class FusedRoles:
    """Roles of one fused op: position of the input / output -> role name."""

    op_name: str
    inputs: Mapping[int, str]
    outputs: Mapping[int, str]

    @property
    def all_roles(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.inputs.values()) | set(self.outputs.values())))


_REGISTRY: dict[str, FusedRoles] = {}


def _op_key(op: object) -> str:
    """Name an op by its packet (``ns::name``) whatever form it was given in."""
    if isinstance(op, torch._ops.OpOverload):
        return op._schema.name
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op._qualified_op_name
    # torch.library.custom_op returns a CustomOpDef with the qualified name.
    name = getattr(op, "_qualname", None)
    if isinstance(name, str):
        return name
    raise TypeError(
        f"register_saved_roles: {op!r} is not an op; pass a torch.library.custom_op "
        "object, an OpOverloadPacket (torch.ops.ns.name) or an OpOverload "
        "(torch.ops.ns.name.default)"
    )


def _check_positions(kind: str, roles: Mapping[int, str], op_name: str) -> dict[int, str]:
    out = {}
    for pos, role in dict(roles).items():
        if not isinstance(pos, int) or pos < 0:
            raise ValueError(
                f"register_saved_roles({op_name}): {kind} position {pos!r} must be an int >= 0"
            )
        if not isinstance(role, str) or not role:
            raise ValueError(
                f"register_saved_roles({op_name}): {kind}[{pos}] role {role!r} must be a "
                "non-empty string"
            )
        out[pos] = role
    return out


def register_saved_roles(
    op: object,
    inputs: Mapping[int, str] | None = None,
    outputs: Mapping[int, str] | None = None,
) -> FusedRoles:
    """Declare which sub-op of a fused op each input / output belongs to.

    ``inputs={0: "fc1"}`` says: the tensor passed as input 0 of the op, when it
    is saved for backward, belongs to the ``fc1`` sub-op (whichever module
    produced it). ``outputs={1: "act", 2: "fc2"}`` says the same for outputs.
    Registering the same op again replaces its roles.
    """
    key = _op_key(op)
    entry = FusedRoles(
        op_name=key,
        inputs=_check_positions("inputs", inputs or {}, key),
        outputs=_check_positions("outputs", outputs or {}, key),
    )
    if not entry.inputs and not entry.outputs:
        raise ValueError(f"register_saved_roles({key}): give at least one input or output role")
    _REGISTRY[key] = entry
    return entry


def roles_of(target: object) -> FusedRoles | None:
    """Roles registered for an FX node target (an OpOverload), or None."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return _REGISTRY.get(_op_key(target))
    return None


def registered_role_names() -> tuple[str, ...]:
    return tuple(sorted({r for e in _REGISTRY.values() for r in e.all_roles}))
