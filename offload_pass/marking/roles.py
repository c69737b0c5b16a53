"""Role registry for fused multi-output ops.

Takes: a fused op and a map from its input / output positions to sub-op role
names (``register_saved_roles``). Gives: ``roles_of(target)``, used by the plan
stage to attribute each saved tensor of a fused op to its own sub-op, so that
markers with ``roles=`` select tensor by tensor instead of the op as a whole;
and ``known_roles()``, every role a mark may name (``MLP_ROLES`` and the
registered ones), which the marking API checks ``roles=`` against.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import torch

from offload_pass.registry import REGISTRY

__all__ = ["MLP_ROLES", "register_saved_roles", "roles_of", "known_roles", "FusedRoles"]

# The roles of an MLP written with matmuls, found by its structure
# (annotation/mlp_roles.py): input of the first matmul, its output, input of
# the second.
MLP_ROLES = ("act", "fc1", "fc2")


@dataclasses.dataclass(frozen=True)
class FusedRoles:
    """Roles of one fused op: position of the input / output -> role name."""

    op_name: str
    inputs: Mapping[int, str]
    outputs: Mapping[int, str]

    @property
    def all_roles(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.inputs.values()) | set(self.outputs.values())))


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


def _schemas(op: object, key: str) -> list:
    """Schemas of every overload of the packet ``key`` (roles apply to all)."""
    namespace, _, name = key.partition("::")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        schemas = [getattr(packet, overload)._schema for overload in packet.overloads()]
    except (AttributeError, RuntimeError):
        schemas = []
    own = getattr(op, "_schema", None) or getattr(getattr(op, "_opoverload", None), "_schema", None)
    if not schemas and own is not None:
        schemas = [own]
    if not schemas:
        raise TypeError(
            f"register_saved_roles: found no schema for {key}; pass a torch.library.custom_op "
            "object, an OpOverloadPacket (torch.ops.ns.name) or an OpOverload "
            "(torch.ops.ns.name.default)"
        )
    return schemas


def _is_tensor(type_: object) -> bool:
    """A schema type that holds one tensor (``Tensor`` or ``Tensor?``)."""
    return type_.isSubtypeOf(torch._C.OptionalType.ofTensor())  # type: ignore[attr-defined]


def _valid_positions(kind: str, schemas: list) -> Optional[dict[int, str]]:
    """Positions a role of ``kind`` can apply to -> their names; None where
    any position may (an op returning a tensor list).

    An input role applies to a tensor passed by position (FX puts keyword-only
    arguments in ``kwargs``); an output role to a tensor that a ``getitem`` of
    a multi-output op takes out.
    """
    valid: dict[int, str] = {}
    for schema in schemas:
        if kind == "inputs":
            for pos, arg in enumerate(a for a in schema.arguments if not a.kwarg_only):
                if _is_tensor(arg.type):
                    valid.setdefault(pos, arg.name)
        elif len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch.ListType):
            if _is_tensor(schema.returns[0].type.getElementType()):
                return None
        elif len(schema.returns) > 1:
            for pos, ret in enumerate(schema.returns):
                if _is_tensor(ret.type):
                    valid.setdefault(pos, ret.name or f"output {pos}")
    return valid


def _describe_valid(kind: str, valid: dict[int, str]) -> str:
    if not valid:
        return f"the op has no {kind[:-1]} position a role can apply to"
    what = "tensor inputs passed by position" if kind == "inputs" else "tensor outputs"
    listing = ", ".join(f"{p} ({n})" for p, n in sorted(valid.items()))
    return f"valid {kind[:-1]} positions (the op's {what}, in 0..{max(valid)}) are: {listing}"


def _check_positions(kind: str, roles: object, op_name: str, schemas: list) -> dict[int, str]:
    if roles is None:
        return {}
    if not isinstance(roles, Mapping):
        raise TypeError(
            f"register_saved_roles({op_name}): {kind} must be a dict of position -> role name "
            f"like {{0: 'fc1'}}, got {type(roles).__name__} {roles!r}"
        )
    valid = _valid_positions(kind, schemas)
    single_output = kind == "outputs" and all(len(s.returns) <= 1 for s in schemas)
    single = any(len(s.returns) == 1 for s in schemas)
    out = {}
    for pos, role in roles.items():
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            kind_of = "a bool" if isinstance(pos, bool) else "not an int >= 0"
            hint = "any int >= 0" if valid is None else _describe_valid(kind, valid)
            raise ValueError(
                f"register_saved_roles({op_name}): {kind} position {pos!r} is {kind_of}; {hint}"
            )
        if not isinstance(role, str) or not role:
            raise ValueError(
                f"register_saved_roles({op_name}): {kind}[{pos}] role {role!r} must be a "
                "non-empty string"
            )
        if valid is not None and pos not in valid:
            head = f"register_saved_roles({op_name}): {kind}[{pos}] can never apply"
            if single_output:
                raise ValueError(
                    f"{head}: {op_name} returns {'a single output' if single else 'no output'}, "
                    "and output roles are only "
                    "recognised on the getitem outputs of a multi-output op; give an input "
                    "role (inputs={...}) of the op that consumes the tensor, or register a "
                    "multi-output op"
                )
            raise ValueError(f"{head}: {_describe_valid(kind, valid)}")
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
    Registering the same op again replaces its roles. A position that can
    never apply (past the op's tensor inputs / outputs, a non-tensor one, or
    any output of a single-output op) is an error.
    """
    key = _op_key(op)
    schemas = _schemas(op, key)
    entry = FusedRoles(
        op_name=key,
        inputs=_check_positions("inputs", inputs, key, schemas),
        outputs=_check_positions("outputs", outputs, key, schemas),
    )
    if not entry.inputs and not entry.outputs:
        raise ValueError(f"register_saved_roles({key}): give at least one input or output role")
    REGISTRY.saved_roles[key] = entry
    return entry


def roles_of(target: object) -> FusedRoles | None:
    """Roles registered for an FX node target (an OpOverload), or None."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return REGISTRY.saved_roles.get(_op_key(target))
    return None


def known_roles() -> frozenset[str]:
    """Every role a mark may name now: an MLP's and each registered fused op's."""
    roles = set(MLP_ROLES)
    for entry in REGISTRY.saved_roles.values():
        roles.update(entry.all_roles)
    return frozenset(roles)
