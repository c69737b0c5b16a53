"""Whether a marked forward is traced for an offload backend.

Takes: the Dynamo trace running now (its compiler function and the backend
wrappers around it). Gives ``check_backend_traced``, called while Dynamo
traces a marked forward, which warns once when the backend is not an
offload backend (the marks would do nothing there), and ``warn_once``, the
marking stage's once-only warnings (kept in ``MARKS.warned``), each at the
user's line that led to it (``user_stacklevel``).
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

from offload_pass.marking.mark_stack import MARKS

__all__ = ["check_backend_for_marks", "check_backend_traced", "user_stacklevel", "warn_once"]


# How many backend wrappers (Dynamo's, DDPOptimizer, a user's) to look through
# for the offload backend. A chain of them is a few deep; the bound only ends
# the walk where wrappers refer back to one another, which would loop forever.
_MAX_BACKEND_WRAPPERS = 16


def check_backend_for_marks() -> bool:
    """Called while Dynamo traces a marked forward: warn once if the backend
    is not an offload backend, since the marks would then do nothing."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        fn = InstructionTranslator.current_tx().output.compiler_fn
        seen = 0
        while fn is not None and seen < _MAX_BACKEND_WRAPPERS:
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
    warn_once(
        "offload_pass: the model has offload marks but is compiled with another backend; "
        "the marks have no effect there. Compile with "
        "torch.compile(model, backend=offload_pass.offload_backend) to offload."
    )
    return False


check_backend_traced = torch._dynamo.assume_constant_result(check_backend_for_marks)


# Frames under torch's and this package's folders are never the user's;
# the package's examples are user code.
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_EXAMPLES_DIR = os.path.join(_PACKAGE_DIR, "examples") + os.sep


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen runpy>, <string>: Python's own
        return False
    path = os.path.abspath(filename)
    return path.startswith(_EXAMPLES_DIR) or not path.startswith((_TORCH_DIR, _PACKAGE_DIR))


def user_stacklevel() -> int:
    """The ``stacklevel`` to pass to ``warnings.warn`` called by this
    function's caller: the innermost frame outside torch and offload_pass, the
    user's line that led here, through any depth of torch.compile's
    machinery (a mark traced by Dynamo warns from deep inside it)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and not _is_user_file(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2


def warn_once(message: str) -> None:
    """Warn ``message`` once (until ``MARKS.reset()``), at the user's line
    that led to it (``user_stacklevel``)."""
    if message not in MARKS.warned:
        MARKS.warned.add(message)
        warnings.warn(message, stacklevel=user_stacklevel())
