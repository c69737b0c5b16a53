"""Stage 1, markers: what the user asks to offload.

Takes: a model and targets (module instances, name patterns, module classes),
regions inside ``forward``, or single tensors. Gives: ``node.meta["custom"]``
annotations on every node traced under a mark, through
``torch.fx.traceback.annotate`` (Dynamo carries them into the joint graph, and
backward nodes inherit them). Nothing here decides; ``annotations.py`` reads
the marks and ``plan.py`` decides.

Precedence: a per-tensor mark beats every module / region mark; the innermost
region or module mark beats outer ones (an inner annotation replaces the outer
one); at the same level keep beats offload.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import logging
import re
import sys
import types
import warnings
from typing import Callable, Iterable, Iterator, Optional, Sequence

import torch
import torch.nn as nn
from torch.fx.traceback import annotate

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

# Keys in node.meta["custom"]. MARK_KEY holds the module / region mark:
# {"offload": roles, "keep": roles, "source": str}, roles being a tuple of role
# names or ALL_ROLES. TENSOR_MARK_KEY holds "offload" / "keep" on a view node
# that mark_offload / mark_not_offload inserted.
ALL_ROLES = ("*",)

_ORIG_FORWARD = "_offload_pass_orig_forward"
_MODULE_MARK = "_offload_pass_mark"

# Marks of the marked modules and regions running eagerly now, outermost
# first. A module or region runs eagerly when nothing is compiled, or when
# Dynamo broke the graph inside it and runs that frame without compiling it;
# the functions it calls are then compiled as frames of their own, whose
# graphs carry no annotation: the backend reads their marks from here.
_ACTIVE: list[dict] = []
_ACTIVE_KEYS: list[str] = []  # mark_key of each prefix of _ACTIVE


def active_marks() -> tuple[dict, ...]:
    """Marks of the marked modules and regions running eagerly now, outermost first."""
    return tuple(_ACTIVE)


def mark_key(marks: Sequence[dict]) -> str:
    """What a frame compiled under ``marks`` depends on: the innermost mark
    without its names (two modules marked alike may share their graphs)."""
    if not marks:
        return ""
    innermost = marks[-1]
    return repr((innermost.get("offload"), innermost.get("keep"), innermost.get("outer", ())))


def active_mark_key() -> str:
    """``mark_key(active_marks())``, without building it (called per graph call)."""
    return _ACTIVE_KEYS[-1] if _ACTIVE_KEYS else ""


# Dynamo guards a compiled frame on its inputs, not on our marks, so a frame
# compiled inside one marked module could be reused inside a module marked
# otherwise (or not at all), after a graph break. Three layers keep that from
# going unnoticed:
# 1. the forward of a marked module, run eagerly under a compile, runs as a
#    copy of its code per mark (Dynamo caches per code object), which covers
#    a graph break in the marked module's own forward, both ways;
# 2. where torch has compile-cache buckets (isolate_recompiles, torch 2.13),
#    deeper frames compiled under a mark go to that mark's bucket (a bucket
#    still reads the unmarked one, so this covers one way only);
# 3. the backend checks at each call that a graph runs under the marks it
#    was compiled for, and warns once when not.
_eval_frame = torch._C._dynamo.eval_frame
_set_bucket = getattr(_eval_frame, "set_eval_frame_isolate_recompiles_id", None)
_get_bucket = getattr(_eval_frame, "get_eval_frame_isolate_recompiles_id", None)
CACHE_BUCKETS = _set_bucket is not None and _get_bucket is not None
_buckets: dict[tuple[int, str], int] = {}
_forward_copies: dict[tuple[types.FunctionType, str], types.FunctionType] = {}


def _enter_bucket(key: str) -> Optional[int]:
    """Switch Dynamo's cache to the bucket of ``key``; returns the bucket to
    restore, or None where torch has no buckets."""
    if not CACHE_BUCKETS:
        return None
    prior = _get_bucket()
    bucket = _buckets.get((prior, key))
    if bucket is None:
        # Drawn from torch's own counter, so it never collides with a bucket
        # of torch.compile(isolate_recompiles=True).
        from torch._dynamo import eval_frame

        bucket = _buckets[(prior, key)] = next(eval_frame._next_isolate_recompiles_id)
    _set_bucket(bucket)
    return prior


def _leave_bucket(prior: Optional[int]) -> None:
    if prior is not None:
        _set_bucket(prior)


def _forward_for_marks(orig: Callable, key: str) -> Callable:
    """``orig`` (a bound forward) running a copy of its code that belongs to
    ``key``: Dynamo then compiles and caches its frames apart from other marks."""
    func = getattr(orig, "__func__", None)
    owner = getattr(orig, "__self__", None)
    if not isinstance(func, types.FunctionType) or owner is None:
        return orig
    copy = _forward_copies.get((func, key))
    if copy is None:
        code = func.__code__
        # An extra, unused constant makes the copy differ from the original by
        # value too: Dynamo keys its resume functions on code equality.
        code = code.replace(co_consts=code.co_consts + (f"offload_pass marks {key}",))
        copy = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
        copy.__kwdefaults__ = func.__kwdefaults__
        copy.__qualname__ = func.__qualname__
        _forward_copies[(func, key)] = copy
    return types.MethodType(copy, owner)


def _dynamo_running() -> bool:
    """True inside a call of a torch.compile'd function or module (tracing or
    running), where frames called from eager code get compiled."""
    try:
        callback = _eval_frame.get_eval_frame_callback()
    except AttributeError:  # an internal that moved: assume plain eager
        return False
    return callback is not None and callback is not False


@contextlib.contextmanager
def _eager_mark(payload: dict, what: str) -> Iterator[None]:
    """``payload`` is active (and its cache bucket current) inside the block.

    A region left open inside the block (entered by hand, never exited)
    would mark everything after it: that is an error naming where it opened.
    """
    _ACTIVE.append(payload)
    _ACTIVE_KEYS.append(mark_key(_ACTIVE))
    prior = _enter_bucket(_ACTIVE_KEYS[-1])
    try:
        yield
    finally:
        _leave_bucket(prior)
        index = next((i for i in range(len(_ACTIVE) - 1, -1, -1) if _ACTIVE[i] is payload), -1)
        left_open = _ACTIVE[index + 1:]
        del _ACTIVE[max(index, 0):]
        del _ACTIVE_KEYS[len(_ACTIVE):]
    if left_open:
        places = ", ".join(m.get("where", "?") for m in left_open)
        raise RuntimeError(
            f"offload_pass: {what} ended while the offload_region opened at {places} was "
            "still open; open regions with `with offload_pass.offload_region():` so each "
            "closes in the function that opens it"
        )


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


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    # "*" matches one name segment, "**" any number of them, so "layers.*.attn"
    # means the attention of each layer and not of a nested block.
    parts = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
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


def _display(name: str) -> str:
    return name if name else "<root>"


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
                names = [n for n, _ in named if n]
                close = difflib.get_close_matches(target, names, n=5, cutoff=0.4)
                hint = f"close names: {', '.join(close)}" if close else (
                    f"names look like: {', '.join(names[:5])}" if names else "the model has no submodules"
                )
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


def _check_backend_for_marks() -> bool:
    """Called while Dynamo traces a marked forward: warn once if the backend
    is not an offload backend, since the marks would then do nothing."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        fn = InstructionTranslator.current_tx().output.compiler_fn
        seen = 0
        while fn is not None and seen < 16:
            if getattr(fn, "_is_offload_backend", False):
                return True
            fn = (
                getattr(fn, "_torchdynamo_orig_backend", None)
                or getattr(fn, "compiler_fn", None)
                # DDP: Dynamo calls DDPOptimizer.compile_fn, which holds the backend.
                or getattr(getattr(fn, "__self__", None), "backend_compile_fn", None)
            )
            seen += 1
    except Exception:  # an internal that moved: never let a check break tracing
        return True
    _warn_once(
        "offload_pass: the model has offload marks but is compiled with another backend; "
        "the marks have no effect there. Compile with "
        "torch.compile(model, backend=offload_pass.offload_backend) to offload."
    )
    return False


_check_backend_traced = torch._dynamo.assume_constant_result(_check_backend_for_marks)
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _install_all(model: nn.Module) -> None:
    """(Re)install the forward wrapper of every marked module of ``model``.

    An inner annotation replaces the outer one, so each module's payload also
    carries the marks of its marked ancestors ("outer", innermost first): a
    mark restricted to some roles falls back to them for the other roles.
    """
    stack: list[tuple[str, dict]] = []
    for name, mod in model.named_modules():
        while stack and not (name.startswith(stack[-1][0] + ".") or stack[-1][0] == ""):
            stack.pop()
        mark = mod.__dict__.get(_MODULE_MARK)
        if not mark:
            continue
        outer = tuple(
            {k: v for k, v in m.items() if k != "outer"} for _, m in reversed(stack)
        )
        _install_forward(mod, {**mark, "outer": outer, "qualname": name})
        stack.append((name, mark))


def _install_forward(module: nn.Module, payload: dict) -> None:
    if _ORIG_FORWARD not in module.__dict__:
        module.__dict__[_ORIG_FORWARD] = module.forward
    orig = module.__dict__[_ORIG_FORWARD]

    # A plain wrapper with `with annotate(...)` (not annotate_fn): it also
    # annotates the forward of the module that torch.compile was called on.
    @functools.wraps(orig)
    def forward(*args: object, **kwargs: object) -> object:
        if torch.compiler.is_compiling():
            _check_backend_traced()
            with annotate({MARK_KEY: payload}):
                return orig(*args, **kwargs)
        # Running eagerly: either no compile at all, or Dynamo broke the
        # graph around this call and compiles the frames inside on their
        # own. Those graphs carry no annotation, so the backend reads the
        # marks of the modules running now from this stack.
        with _eager_mark(payload, f"the forward of module {_display(payload['qualname'])}"):
            with annotate({MARK_KEY: payload}):
                if _dynamo_running():
                    return _forward_for_marks(orig, active_mark_key())(*args, **kwargs)
                return orig(*args, **kwargs)

    # A new function object each time the mark changes: Dynamo guards on it,
    # so a changed mark recompiles instead of reusing the old graph.
    module.forward = forward  # type: ignore[method-assign]


def _mark_modules(model: nn.Module, targets: Sequence[object], roles: object, mode: str, api: str) -> list[str]:
    role_tuple = _normalize_roles(roles, api)
    matched = _resolve_targets(model, targets, api)
    remember_module_names(model)
    if role_tuple != ALL_ROLES:
        for name, mod in matched:
            declared = _declared_roles(mod)
            if declared and not set(role_tuple) <= declared:
                raise ValueError(
                    f"{api}: module {_display(name)} ({type(mod).__name__}) has no role "
                    f"{sorted(set(role_tuple) - declared)}; its roles are {sorted(declared)}"
                )
    for name, mod in matched:
        mark = dict(mod.__dict__.get(_MODULE_MARK) or {"source": f"module {_display(name)}"})
        previous = mark.get(mode)
        if previous is None or previous == ALL_ROLES or role_tuple == ALL_ROLES:
            mark[mode] = ALL_ROLES if ALL_ROLES in (previous, role_tuple) else role_tuple
        else:
            mark[mode] = tuple(sorted(set(previous) | set(role_tuple)))
        mod.__dict__[_MODULE_MARK] = mark
    _install_all(model)
    names = [name for name, _ in matched]
    log.info("offload_pass: %s marked %s", api, ", ".join(_display(n) for n in names))
    return names


def offload_marked_modules(models: Iterable[nn.Module]) -> list[str]:
    """Qualified names of the modules marked for offload in ``models``."""
    names = set()
    for model in models:
        for name, mod in model.named_modules():
            mark = mod.__dict__.get(_MODULE_MARK)
            if mark and mark.get("offload") is not None:
                names.add(name)
    return sorted(names)


def offload_modules(model: nn.Module, *targets: object, roles: Iterable[str] | None = None) -> list[str]:
    """Offload what the matched modules save for backward.

    A target is a submodule, a pattern on qualified names relative to ``model``
    ("layers.*.attn"; ``*`` is one name segment, ``**`` any number; a pattern
    never matches the model itself: pass ``model`` as a target for that), or an
    ``nn.Module`` subclass. ``roles`` restricts the mark to those sub-op roles
    of fused ops (see ``register_saved_roles``). Returns the names matched.
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
    cleared = []
    for name, mod in model.named_modules():
        if _ORIG_FORWARD in mod.__dict__:
            orig = mod.__dict__.pop(_ORIG_FORWARD)
            mod.__dict__.pop(_MODULE_MARK, None)
            if getattr(orig, "__self__", None) is mod and getattr(orig, "__func__", None) is type(mod).forward:
                mod.__dict__.pop("forward", None)
            else:
                mod.forward = orig  # type: ignore[method-assign]
            cleared.append(name)
    return cleared


def offload_region(enabled: bool = True, roles: Iterable[str] | None = None) -> contextlib.AbstractContextManager:
    """Inside ``forward``: mark everything produced in the block.

    ``enabled=False`` keeps it on device, overriding any outer mark.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"offload_region: enabled must be True or False, got {enabled!r}")
    role_tuple = _normalize_roles(roles, "offload_region")
    mode = "offload" if enabled else "keep"
    payload = {mode: role_tuple, "source": f"offload_region(enabled={enabled})"}
    if torch.compiler.is_compiling():
        return annotate({MARK_KEY: payload})
    caller = sys._getframe(1)
    where = f"{caller.f_code.co_filename}:{caller.f_lineno} in {caller.f_code.co_name}"
    return _EagerRegion({**payload, "source": f"{payload['source']} at {where}", "where": where})


class _EagerRegion:
    """``offload_region`` outside Dynamo's tracing: plain eager code, or a
    frame Dynamo runs without compiling it (a graph break inside the region:
    Dynamo cannot resume inside ``torch.fx.traceback.annotate``). Frames
    compiled inside take the region's mark from ``active_marks()``."""

    def __init__(self, payload: dict) -> None:
        self.payload = payload
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> None:
        where = self.payload["where"]
        if _dynamo_running():
            _warn_once(
                f"offload_pass: the offload_region at {where} runs eagerly inside a "
                "torch.compile'd call, usually because of a graph break inside the region "
                "(Dynamo cannot resume inside one). What that function computes itself is "
                "neither compiled nor offloaded; the functions and modules it calls are "
                "compiled on their own and keep the region's mark. Move the graph break out "
                "of the region, or mark the module with offload_modules (module marks "
                "survive graph breaks)."
            )
        self._stack.enter_context(_eager_mark(self.payload, f"the offload_region at {where}"))
        self._stack.enter_context(annotate({MARK_KEY: self.payload}))

    def __exit__(self, *exc: object) -> bool:
        return bool(self._stack.__exit__(*exc))


# Eager-only code: Dynamo must never compile these frames on their own (a
# frame Dynamo runs eagerly calls them), while tracing still inlines
# offload_region itself.
for _fn in (
    offload_region, _EagerRegion.__enter__, _EagerRegion.__exit__, _eager_mark.__wrapped__,
    _enter_bucket, _leave_bucket, _dynamo_running, _warn_once, _forward_for_marks, active_mark_key,
):
    _skip_code = getattr(torch._dynamo.eval_frame, "skip_code", None)
    if _skip_code is not None:  # without it Dynamo traces them, finds no op, and runs them
        _skip_code(_fn.__code__)


def _mark_tensors(tensors: tuple[object, ...], mode: str, api: str) -> object:
    if not tensors:
        raise ValueError(f"{api}: give at least one tensor")
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{api}: argument {i} is a {type(t).__name__}, not a tensor")
    if not torch.compiler.is_compiling():
        # Eager: nothing is offloaded, so the mark costs nothing.
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


def module_marks(model: nn.Module) -> Iterator[tuple[str, dict]]:
    """(name, mark) for every marked submodule, for reports."""
    for name, mod in model.named_modules():
        mark = mod.__dict__.get(_MODULE_MARK)
        if mark:
            yield name, dict(mark)
