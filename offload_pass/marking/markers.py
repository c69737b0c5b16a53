"""Stage 1, markers: what the user asks to offload.

Takes: a model and targets (module instances, name patterns, module classes),
regions inside ``forward``, or single tensors; validates them, with errors
that say what to pass instead. Gives: a ``Mark`` per marked module or region,
carried onto every node traced under it as ``node.meta["custom"]``
(``mark_keeping.py`` says how, and how compiled frames are kept apart by
mark), and per-tensor marks on a view node. Nothing here decides;
``annotations.py`` reads the marks and ``plan.py`` decides.

Precedence: a per-tensor mark beats every module / region mark; the innermost
region or module mark beats outer ones (an inner annotation replaces the outer
one); at the same level keep beats offload.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import re
import sys
from typing import Iterable, Sequence

import torch
import torch.nn as nn
from torch.fx.traceback import annotate

from offload_pass.marking.backend_check import warn_once
from offload_pass.marking.mark import ALL_ROLES, Mark, display_name
from offload_pass.marking.mark_keeping import EagerRegion, install_forward, restore_forward, skip_frames
from offload_pass.marking.roles import known_roles
from offload_pass.marking.naming import remember_module_names
from offload_pass.meta_keys import MARK_KEY, TENSOR_MARK_KEY

__all__ = [
    "offload_modules",
    "keep_modules",
    "offload_region",
    "mark_offload",
    "mark_not_offload",
    "clear_marks",
    "ALL_ROLES",
]

log = logging.getLogger("offload_pass")

# A marked module keeps its own Mark (roles added, not yet placed under its
# ancestors) in its __dict__ under this name. node.meta["custom"] holds
# Mark.to_custom() under MARK_KEY, and "offload" / "keep" under
# TENSOR_MARK_KEY on a view node that mark_offload / mark_not_offload inserted.
_MODULE_MARK = "_offload_pass_mark"


def _normalize_roles(roles: object, where: str) -> tuple[str, ...]:
    if roles is None:
        return ALL_ROLES
    if isinstance(roles, str):
        roles = [roles]
    try:
        out = tuple(roles)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{where}: roles must be a list of role names, got {roles!r}") from None
    if not out or not all(isinstance(r, str) and r for r in out):
        raise ValueError(f"{where}: roles must be a non-empty list of role names, got {roles!r}")
    return tuple(sorted(set(out)))


def _check_roles(role_tuple: tuple[str, ...], where: str, declared: frozenset[str] = frozenset()) -> None:
    """A role no MLP, registered fused op or module declares could never
    select a tensor: refused now rather than when the model compiles."""
    if role_tuple == ALL_ROLES:
        return
    valid = known_roles() | declared
    unknown = sorted(set(role_tuple) - valid - set(ALL_ROLES))
    if unknown:
        raise ValueError(
            f"{where}: unknown role {unknown}; valid roles: {sorted(valid)} (an MLP's, a fused op's "
            "registered with offload_pass.register_saved_roles before marking, or a module's offload_roles)"
        )


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    # "*" matches one name segment, "**" any number of them, zero included,
    # so "layers.*.attn" means the attention of each layer and not of a
    # nested block, and "**.fc1" also finds a top-level fc1.
    parts = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**.", i):
            parts.append(r"(?:.*\.)?")
            i += 3
        elif pattern.startswith(".**", i) and i + 3 == len(pattern):
            parts.append(r"(?:\..*)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^.]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^.]")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(parts) + r"\Z")


def _generalised(name: str) -> str:
    """``model.layers.0.self_attn`` -> ``model.layers.*.self_attn``."""
    return ".".join("*" if part.isdigit() else part for part in name.split("."))


def _no_match_hint(target: str, names: list[str]) -> str:
    """Close names, and the nearest pattern: a name, or a name with ``*``
    for each numeric segment, whichever is closer to ``target``."""
    if not names:
        return "the model has no submodules"
    close = difflib.get_close_matches(target, names, n=5, cutoff=0.4)
    hint = f"close names: {', '.join(close)}" if close else f"names look like: {', '.join(names[:5])}"
    candidates = sorted(set(names) | {_generalised(n) for n in names})
    nearest = difflib.get_close_matches(target, candidates, n=1, cutoff=0.4)
    return f"{hint}; did you mean {nearest[0]!r}?" if nearest else hint


def _unwrap_compiled(module: object) -> object:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``) runs:
    marks go on the user's model, named as the user names its modules."""
    while isinstance(module, torch._dynamo.eval_frame.OptimizedModule):
        module = module._orig_mod
    return module


def _resolve_targets(model: nn.Module, targets: Sequence[object], api: str) -> list[tuple[str, nn.Module]]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{api}: the first argument must be the nn.Module to mark, got {type(model).__name__}")
    if not targets:
        raise ValueError(
            f"{api}: give at least one target: a submodule, a name pattern like 'layers.*.attn', "
            "or an nn.Module subclass"
        )
    named = list(model.named_modules(remove_duplicate=False))
    by_id: dict[int, str] = {}
    for name, mod in named:
        by_id.setdefault(id(mod), name)
    found: dict[str, nn.Module] = {}
    for target in targets:
        matched: list[tuple[str, nn.Module]]
        target = _unwrap_compiled(target)
        if isinstance(target, nn.Module):
            if id(target) not in by_id:
                raise ValueError(
                    f"{api}: target {type(target).__name__} instance is not a submodule of the model"
                )
            matched = [(by_id[id(target)], target)]
        elif isinstance(target, type) and issubclass(target, nn.Module):
            matched = [(n, m) for n, m in named if isinstance(m, target)]
            if not matched:
                classes = sorted({type(m).__name__ for _, m in named})
                raise ValueError(
                    f"{api}: no submodule is an instance of {target.__name__}; "
                    f"the model has: {', '.join(classes)}"
                )
        elif isinstance(target, str):
            if not target:
                raise ValueError(
                    f"{api}: an empty pattern is not allowed (it would name the model itself); "
                    "pass a submodule pattern like 'layers.*.attn', or the model itself as a "
                    "target to mark everything"
                )
            # A pattern never names the root: that takes the model itself.
            regex = _pattern_regex(target)
            matched = [(n, m) for n, m in named if n and regex.match(n)]
            if not matched:
                hint = _no_match_hint(target, [n for n, _ in named if n])
                raise ValueError(f"{api}: pattern {target!r} matches no submodule; {hint}")
        else:
            raise TypeError(
                f"{api}: target {target!r} ({type(target).__name__}) is not a module, a name "
                "pattern string or an nn.Module subclass"
            )
        for name, mod in matched:
            found.setdefault(name, mod)
    return sorted(found.items(), key=lambda kv: kv[0])


def _declared_roles(module: nn.Module) -> set[str]:
    roles: set[str] = set()
    for sub in module.modules():
        roles.update(getattr(type(sub), "offload_roles", ()) or ())
    return roles

def _install_all(model: nn.Module) -> None:
    """(Re)install the forward wrapper of every marked module of ``model``.

    An inner annotation replaces the outer one, so each module's mark also
    carries the marks of its marked ancestors ("outer", innermost first): a
    mark restricted to some roles falls back to them for the other roles.
    """
    stack: list[tuple[str, Mark]] = []
    for name, mod in model.named_modules():
        while stack and not (name.startswith(stack[-1][0] + ".") or stack[-1][0] == ""):
            stack.pop()
        mark = mod.__dict__.get(_MODULE_MARK)
        if mark is None:
            continue
        install_forward(mod, mark.placed(name, tuple(m for _, m in reversed(stack))))
        stack.append((name, mark))


def _mark_modules(model: nn.Module, targets: Sequence[object], roles: object, mode: str, api: str) -> list[str]:
    model = _unwrap_compiled(model)
    role_tuple = _normalize_roles(roles, api)
    matched = _resolve_targets(model, targets, api)
    remember_module_names(model)
    if role_tuple != ALL_ROLES:
        for name, mod in matched:
            declared = _declared_roles(mod)
            if declared and not set(role_tuple) <= declared:
                raise ValueError(
                    f"{api}: module {display_name(name)} ({type(mod).__name__}) has no role "
                    f"{sorted(set(role_tuple) - declared)}; its roles are {sorted(declared)}"
                )
    _check_roles(role_tuple, api, frozenset().union(*(_declared_roles(mod) for _, mod in matched)))
    for name, mod in matched:
        mark = mod.__dict__.get(_MODULE_MARK) or Mark.for_module(name)
        mod.__dict__[_MODULE_MARK] = mark.adding(mode, role_tuple)
    _install_all(model)
    names = [name for name, _ in matched]
    log.info("offload_pass: %s marked %s", api, ", ".join(display_name(n) for n in names))
    return names


def offload_marked_modules(models: Iterable[nn.Module]) -> list[str]:
    """Qualified names of the modules marked for offload in ``models``."""
    names = set()
    for model in models:
        for name, mod in model.named_modules():
            mark = mod.__dict__.get(_MODULE_MARK)
            if mark is not None and mark.offload is not None:
                names.add(name)
    return sorted(names)


def offload_modules(model: nn.Module, *targets: object, roles: Iterable[str] | None = None) -> list[str]:
    """Offload what the matched modules save for backward.

    A target is a submodule, a pattern on qualified names relative to ``model``
    ("layers.*.attn"; ``*`` is one name segment, ``**`` any number, zero
    included; a pattern
    never matches the model itself: pass ``model`` as a target for that), or an
    ``nn.Module`` subclass. ``roles`` restricts the mark to those sub-op roles
    of fused ops (see ``register_saved_roles``). ``model`` may be the
    ``torch.compile`` wrapper: the model it runs is marked, under its own
    names. Returns the names matched.
    """
    return _mark_modules(model, targets, roles, "offload", "offload_modules")


def keep_modules(model: nn.Module, *targets: object, roles: Iterable[str] | None = None) -> list[str]:
    """Keep on device what the matched modules save, whatever outer marks say."""
    return _mark_modules(model, targets, roles, "keep", "keep_modules")


def clear_marks(model: nn.Module) -> list[str]:
    """Remove module marks from ``model`` and its submodules; returns their names."""
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"clear_marks: the argument must be the nn.Module to clear, got {type(model).__name__}"
        )
    model = _unwrap_compiled(model)
    cleared = []
    for name, mod in model.named_modules():
        if restore_forward(mod):
            mod.__dict__.pop(_MODULE_MARK, None)
            cleared.append(name)
    return cleared


def offload_region(enabled: bool = True, roles: Iterable[str] | None = None) -> contextlib.AbstractContextManager:
    """Inside ``forward``: mark everything produced in the block.

    ``enabled=False`` keeps it on device, overriding any outer mark.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"offload_region: enabled must be True or False, got {enabled!r}")
    role_tuple = _normalize_roles(roles, "offload_region")
    if torch.compiler.is_compiling():
        # Traced: a bad role is named when the graph is planned (reading the
        # role registry here would guard every compiled frame on it).
        return annotate({MARK_KEY: Mark.for_region(enabled, role_tuple).to_custom()})
    _check_roles(role_tuple, "offload_region")
    caller = sys._getframe(1)
    where = f"{caller.f_code.co_filename}:{caller.f_lineno} in {caller.f_code.co_name}"
    return EagerRegion(Mark.for_region(enabled, role_tuple, where))


# offload_region is called eagerly by a frame Dynamo runs eagerly: never
# compile it as a frame of its own (mark_keeping.skip_frames); tracing still
# inlines it.
skip_frames(offload_region)


def _mark_tensors(tensors: tuple[object, ...], mode: str, api: str) -> object:
    if not tensors:
        raise ValueError(f"{api}: give at least one tensor")
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{api}: argument {i} is a {type(t).__name__}, not a tensor")
    if not torch.compiler.is_compiling():
        # Eager: nothing is offloaded, so the mark does nothing; said once,
        # at the caller's line.
        warn_once(
            f"offload_pass: {api} ran outside torch.compile, where it does nothing: tensor marks act "
            "only under torch.compile with an offload backend "
            "(torch.compile(model, backend=offload_pass.offload_backend)); the tensors are returned as they are"
        )
        return tensors[0] if len(tensors) == 1 else tensors
    # A view carries the mark into the joint graph; annotations.harvest_tensor_marks
    # moves it to the tensor it views before Inductor removes the no-op view.
    with annotate({TENSOR_MARK_KEY: mode}):
        out = tuple(t.view_as(t) for t in tensors)
    return out[0] if len(out) == 1 else out


def mark_offload(*tensors: torch.Tensor) -> object:
    """Inside ``forward``: offload these tensors if they are saved for backward.
    Returns the tensor(s) to use from here on."""
    return _mark_tensors(tensors, "offload", "mark_offload")


def mark_not_offload(*tensors: torch.Tensor) -> object:
    """Inside ``forward``: keep these tensors on device whatever else is marked.
    Returns the tensor(s) to use from here on."""
    return _mark_tensors(tensors, "keep", "mark_not_offload")
