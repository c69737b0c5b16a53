"""How a mark reaches the traced graph, and how compiled frames are kept apart by mark.

Takes: ``Mark`` values from the marking API (``markers.py``): one per marked
module, whose forward is wrapped here (``install_forward``), and one per
``offload_region`` entered outside Dynamo's tracing (``EagerRegion``).
Gives ``node.meta["custom"][MARK_KEY]`` on every node Dynamo traces under a
mark (``torch.fx.traceback.annotate``), and for code that runs eagerly the
marks running now on ``MARKS`` (``mark_stack.py``), which the backend reads.

Annotating is not enough after a graph break: Dynamo runs the marked
forward (or region) eagerly and compiles the frames it calls on their own,
without the annotation; the eager mark stack fills that gap. Dynamo guards
a frame on its inputs, not on marks, so each mark gets its own copy of the
forward's code and its own cache bucket (see ``CACHE_BUCKETS``). The
eager-only functions here are never compiled as frames of their own
(``skip_frames``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import types
import weakref
from typing import Callable, Iterator, Optional

import torch
import torch.nn as nn
from torch.fx.traceback import annotate

from offload_pass.marking.backend_check import check_backend_traced, warn_once
from offload_pass.marking.mark import Mark, display_name
from offload_pass.marking.mark_stack import MARKS, MarkStack, active_mark_key, active_marks, mark_key
from offload_pass.meta_keys import MARK_KEY

__all__ = [
    "CACHE_BUCKETS",
    "EagerRegion",
    "InstalledMark",
    "MARKS",
    "MarkStack",
    "active_mark_key",
    "active_marks",
    "install_forward",
    "mark_key",
    "marked_forward",
    "restore_forward",
    "skip_frames",
]

_ORIG_FORWARD = "_offload_pass_orig_forward"


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


def _enter_bucket(key: str) -> Optional[int]:
    """Switch Dynamo's cache to the bucket of ``key``; returns the bucket to
    restore, or None where torch has no buckets."""
    if not CACHE_BUCKETS:
        return None
    prior = _get_bucket()
    bucket = MARKS.buckets.get((prior, key))
    if bucket is None:
        # Drawn from torch's own counter, so it never collides with a bucket
        # of torch.compile(isolate_recompiles=True).
        from torch._dynamo import eval_frame

        bucket = MARKS.buckets[(prior, key)] = next(eval_frame._next_isolate_recompiles_id)
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
    copy = MARKS.forward_copies.get((func, key))
    if copy is None:
        code = func.__code__
        # An extra, unused constant makes the copy differ from the original by
        # value too: Dynamo keys its resume functions on code equality.
        code = code.replace(co_consts=code.co_consts + (f"offload_pass marks {key}",))
        copy = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
        copy.__kwdefaults__ = func.__kwdefaults__
        copy.__qualname__ = func.__qualname__
        MARKS.forward_copies[(func, key)] = copy
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
def _eager_mark(mark: Mark, what: str, close: Optional[Callable[[], object]] = None) -> Iterator[None]:
    """``mark`` is active (and its cache bucket current) inside the block;
    ``close`` ends it if it is left open (a region's exit).

    A region left open inside the block (entered by hand, never exited)
    would mark everything after it: it is closed here, and that is an error
    naming where it opened. Closed now, while the block's own annotation is
    still in place (callers enter ``annotate`` outside this block), it puts
    back the annotation and cache bucket it replaced. Left to the garbage
    collector, its suspended exits would put them back at some later moment,
    into whatever runs then (an unmarked model would trace under this mark).
    """
    MARKS.push(mark, close)
    prior = _enter_bucket(MARKS.keys[-1])
    try:
        yield
    finally:
        left_open = MARKS.close_above(mark)
        _leave_bucket(prior)
        MARKS.pop(mark)
    if left_open:
        places = ", ".join(m.where or "?" for m in left_open)
        raise RuntimeError(
            f"offload_pass: {what} ended while the offload_region opened at {places} was "
            "still open; open regions with `with offload_pass.offload_region():` so each "
            "closes in the function that opens it"
        )


# Each installed module mark, by a key of its own (a new key per
# ``InstalledMark``; the entry lives as long as a forward holds it). A traced
# forward passes the key: Dynamo guards a compiled frame on that string (one
# guard a marked module), where the mark's dict would be guarded entry by
# entry, all evaluated before every call's first kernel. Torch 2.11 takes
# only constants as assume_constant_result arguments, hence a key.
_INSTALLED: "weakref.WeakValueDictionary[str, InstalledMark]" = weakref.WeakValueDictionary()
_INSTALL_COUNT = itertools.count()


class InstalledMark:
    """A placed module mark as its forward runs it: the mark, its dict, the
    key Dynamo guards on. A copy of the module shares it; a pickled one is
    given a fresh key when loaded (keys are per process)."""

    def __init__(self, mark: Mark) -> None:
        self.mark = mark
        self.custom = mark.to_custom()
        self.what = f"the forward of module {display_name(mark.qualname or '')}"
        self.key = f"offload_pass mark {next(_INSTALL_COUNT)}"
        _INSTALLED[self.key] = self

    def __reduce__(self) -> tuple:
        return (InstalledMark, (self.mark,))

    def __copy__(self) -> "InstalledMark":
        return self

    def __deepcopy__(self, memo: dict) -> "InstalledMark":
        return self


@torch._dynamo.assume_constant_result
def _traced_custom(key: str) -> dict:
    return _INSTALLED[key].custom


def marked_forward(module: nn.Module, installed: InstalledMark, *args: object, **kwargs: object) -> object:
    """``module``'s own forward, run under ``installed``'s mark. A plain
    function with ``with annotate(...)`` (not annotate_fn): it also annotates
    the forward of the module that torch.compile was called on."""
    orig = getattr(module, _ORIG_FORWARD)
    if torch.compiler.is_compiling():
        check_backend_traced()
        with annotate({MARK_KEY: _traced_custom(installed.key)}):
            return orig(*args, **kwargs)
    # Running eagerly: either no compile at all, or Dynamo broke the graph
    # around this call and compiles the frames inside on their own, without
    # the annotation: the backend reads the marks running now from MARKS.
    # The annotation outside the mark: see _eager_mark.
    MARKS.claim(installed.what)
    with annotate({MARK_KEY: installed.custom}):
        with _eager_mark(installed.mark, installed.what):
            if _dynamo_running():
                return _forward_for_marks(orig, active_mark_key())(*args, **kwargs)
            return orig(*args, **kwargs)


def install_forward(module: nn.Module, mark: Mark) -> None:
    """Make ``module``'s forward run under ``mark`` (a module mark, placed).

    The forward is a ``functools.partial`` of ``marked_forward`` over the
    module itself, never a closure over its bound method: a deep copy of the
    module (or a pickled and loaded one) then runs its own weights under its
    own marks. A new key each time the mark changes: Dynamo guards on it, so
    a changed mark recompiles instead of reusing the old graph.
    """
    if _ORIG_FORWARD not in module.__dict__:
        module.__dict__[_ORIG_FORWARD] = module.forward
    forward = functools.partial(marked_forward, module, InstalledMark(mark))
    functools.update_wrapper(forward, module.__dict__[_ORIG_FORWARD], updated=())
    module.forward = forward  # type: ignore[method-assign]


def restore_forward(module: nn.Module) -> bool:
    """Give ``module`` back the forward it had before ``install_forward``;
    False where it had none installed."""
    if _ORIG_FORWARD not in module.__dict__:
        return False
    orig = module.__dict__.pop(_ORIG_FORWARD)
    if getattr(orig, "__self__", None) is module and getattr(orig, "__func__", None) is type(module).forward:
        module.__dict__.pop("forward", None)
    else:
        module.forward = orig  # type: ignore[method-assign]
    return True


class EagerRegion:
    """``offload_region`` outside Dynamo's tracing: plain eager code, or a
    frame Dynamo runs without compiling it (a graph break inside the region:
    Dynamo cannot resume inside ``torch.fx.traceback.annotate``). Frames
    compiled inside take the region's mark from ``active_marks()``; a region
    that no compiled graph read says, once, that it marked nothing."""

    def __init__(self, mark: Mark) -> None:
        self.mark = mark
        self._stack = contextlib.ExitStack()
        self._reads: Optional[int] = None  # MARKS.reads on entry, outside any compile

    def __enter__(self) -> None:
        where = self.mark.where
        if _dynamo_running():
            warn_once(
                f"offload_pass: the offload_region at {where} runs eagerly inside a "
                "torch.compile'd call, usually because of a graph break inside the region "
                "(Dynamo cannot resume inside one). What that function computes itself is "
                "neither compiled nor offloaded; the functions and modules it calls are "
                "compiled on their own and keep the region's mark. Move the graph break out "
                "of the region, or mark the module with offload_modules (module marks "
                "survive graph breaks)."
            )
        else:
            self._reads = MARKS.reads
        # The annotation outside the mark: see _eager_mark.
        MARKS.claim(f"the offload_region at {where}")
        self._stack.enter_context(annotate({MARK_KEY: self.mark.to_custom()}))
        self._stack.enter_context(_eager_mark(self.mark, f"the offload_region at {where}", self._stack.close))

    def __exit__(self, *exc: object) -> bool:
        suppressed = bool(self._stack.__exit__(*exc))
        if exc[0] is None and self._reads is not None and MARKS.reads == self._reads:
            warn_once(
                f"offload_pass: the offload_region at {self.mark.where} ran outside torch.compile and "
                "marked nothing: regions act only under torch.compile with an offload backend "
                "(torch.compile(model, backend=offload_pass.offload_backend))"
            )
        return suppressed


def skip_frames(*fns: Callable) -> None:
    """Dynamo never compiles ``fns`` as frames of their own; tracing still
    inlines them."""
    skip_code = getattr(torch._dynamo.eval_frame, "skip_code", None)
    if skip_code is None:  # without it Dynamo traces them, finds no op, and runs them
        return
    for fn in fns:
        skip_code(fn.__code__)


# Eager-only code: Dynamo must never compile these frames on their own (a
# frame Dynamo runs eagerly calls them); markers.py adds offload_region,
# which tracing still inlines, as it inlines the Mark methods that an eager
# offload_region calls.
skip_frames(
    EagerRegion.__enter__, EagerRegion.__exit__, _eager_mark.__wrapped__,
    MarkStack.claim, MarkStack.running, MarkStack.push, MarkStack.close_above, MarkStack.pop,
    MarkStack._index, MarkStack._truncate,
    _enter_bucket, _leave_bucket, _dynamo_running, warn_once, _forward_for_marks, active_mark_key,
    Mark.__init__, Mark.for_region, Mark.to_custom,
)
