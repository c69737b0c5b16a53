"""Whether a marked forward is traced for an offload backend.

Takes: the Dynamo trace running now (its compiler function and the backend
wrappers around it). Gives ``check_backend_traced``, called while Dynamo
traces a marked forward, which warns once when the backend is not an
offload backend (the marks would do nothing there), and ``warn_once``, the
marking stage's once-only warnings (kept in ``MARKS.warned``).
"""

from __future__ import annotations

import warnings

import torch

from offload_pass.marking.mark_stack import MARKS

__all__ = ["check_backend_for_marks", "check_backend_traced", "warn_once"]


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


def warn_once(message: str, stacklevel: int = 3) -> None:
    """Warn ``message`` once (until ``MARKS.reset()``); ``stacklevel`` as
    ``warnings.warn`` counts it from here (3: the caller's caller)."""
    if message not in MARKS.warned:
        MARKS.warned.add(message)
        warnings.warn(message, stacklevel=stacklevel)
