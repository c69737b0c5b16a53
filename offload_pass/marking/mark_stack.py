"""The stack of marks running eagerly now, and the key a compiled frame depends on.

Takes: ``Mark`` values pushed by marked forwards and regions running eagerly
(``mark_keeping.py``). Gives ``MARKS`` (a ``MarkStack``, the one instance):
the marks running now in the thread that owns it, what closes each, and
what keeps compiled frames apart by mark; ``active_marks``,
``active_mark_key`` and ``mark_key``, which the backend reads for graphs
compiled inside marked code and checks at each call.
"""

from __future__ import annotations

import dataclasses
import threading
import types
from typing import Callable, Optional, Sequence

from offload_pass.marking.mark import Mark

__all__ = ["MARKS", "MarkStack", "active_mark_key", "active_marks", "mark_key"]


@dataclasses.dataclass
class MarkStack:
    """Everything mark keeping remembers: the marks running eagerly now, and
    what keeps compiled frames apart by mark (see the comment above
    ``CACHE_BUCKETS``)."""

    # Marks of the marked modules and regions running eagerly now, outermost
    # first. A module or region runs eagerly when nothing is compiled, or when
    # Dynamo broke the graph inside it and runs that frame without compiling
    # it; the functions it calls are then compiled as frames of their own,
    # whose graphs carry no annotation: the backend reads their marks from here.
    marks: list[Mark] = dataclasses.field(default_factory=list)
    keys: list[str] = dataclasses.field(default_factory=list)  # mark_key of each prefix of marks
    # How to close each entry if it is left open: a region's exit (a region
    # may be entered by hand), None for a module's forward (a with block).
    closers: list[Optional[Callable[[], object]]] = dataclasses.field(default_factory=list)
    # (bucket current on entry, mark key) -> Dynamo compile-cache bucket.
    buckets: dict[tuple[int, str], int] = dataclasses.field(default_factory=dict)
    # (forward function, mark key) -> the copy of it that runs under that mark.
    forward_copies: dict[tuple[types.FunctionType, str], types.FunctionType] = dataclasses.field(default_factory=dict)
    warned: set[str] = dataclasses.field(default_factory=set)  # warnings already given
    # How many times the backend read the running marks (``active_marks``,
    # ``active_mark_key``): a region entered eagerly that no compiled graph
    # read marked nothing.
    reads: int = 0
    # The thread whose marks the stack holds (threading.get_ident; None while
    # no marks run). torch's annotation state (torch.fx.traceback) is
    # process-wide like this stack, so marked code runs in one thread at a
    # time: ``claim`` refuses a second, and other threads see no marks.
    owner: Optional[int] = None
    _owner_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def claim(self, what: str) -> None:
        """Take the stack for this thread before ``what`` (a marked forward
        or region) annotates anything; refused while marks of another thread
        are running: its annotation would mark the other thread's graphs,
        and theirs its own."""
        me = threading.get_ident()
        with self._owner_lock:
            if self.owner in (None, me):
                self.owner = me
                return
            running = ", ".join(m.where or m.source for m in self.marks)
            raise RuntimeError(
                f"offload_pass: {what} started in thread {threading.current_thread().name!r} while "
                f"{running} runs in another thread; offload marks and torch's annotations "
                "(torch.fx.traceback.annotate) are process-wide, so marked code can run in one "
                "thread at a time. Run marked models one thread at a time (one process per GPU: "
                "DistributedDataParallel or FSDP2, not nn.DataParallel)"
            )

    def running(self) -> bool:
        """Marks are running in this thread."""
        return bool(self.marks) and self.owner == threading.get_ident()

    def push(self, mark: Mark, close: Optional[Callable[[], object]]) -> None:
        if self.owner is None:  # claimed already, unless pushed by hand
            self.owner = threading.get_ident()
        self.marks.append(mark)
        self.keys.append(mark_key(self.marks))
        self.closers.append(close)

    def close_above(self, mark: Mark) -> list[Mark]:
        """Close the entries above ``mark`` (regions opened inside its block
        and left open), innermost first; returns their marks, outermost first."""
        index = self._index(mark)
        if index is None:
            return []
        left_open = self.marks[index + 1:]
        while len(self.marks) > index + 1:
            depth, close = len(self.marks), self.closers[-1]
            try:
                if close is not None:
                    close()  # a region's exit: pops its entry, puts back its bucket and annotation
            finally:
                self._truncate(depth - 1)
        return left_open

    def pop(self, mark: Mark) -> None:
        """Drop ``mark`` and anything above it (nothing, after ``close_above``)."""
        index = self._index(mark)
        if index is not None:
            self._truncate(index)

    def _index(self, mark: Mark) -> Optional[int]:
        return next((i for i in range(len(self.marks) - 1, -1, -1) if self.marks[i] is mark), None)

    def _truncate(self, depth: int) -> None:
        del self.marks[depth:], self.keys[depth:], self.closers[depth:]
        if not self.marks:
            self.owner = None

    def reset(self) -> None:
        """Forget the warnings given, as a fresh import has. Refused inside a
        marked module or region: the stack belongs to the frames running now.

        The cache buckets and the forward copies are kept. Each is a function
        of its key, valid for the life of the process, and Dynamo files the
        frames it compiled under a mark in them: dropped, the next call under
        the same mark would draw a new bucket (or code copy) and compile again,
        leaving the frames of the old one unreachable in Dynamo's caches.
        """
        if self.marks:
            raise RuntimeError(
                "offload_pass: mark state reset inside "
                + ", ".join(m.where or m.source for m in self.marks)
                + "; reset outside marked modules and offload regions"
            )
        self.warned.clear()


MARKS = MarkStack()


def active_marks() -> tuple[Mark, ...]:
    """Marks of the marked modules and regions running eagerly now in this
    thread, outermost first."""
    if not MARKS.running():
        return ()
    MARKS.reads += 1
    return tuple(MARKS.marks)


def mark_key(marks: Sequence[Mark]) -> str:
    """What a frame compiled under ``marks`` depends on: the innermost mark
    without its names (two modules marked alike may share their graphs)."""
    if not marks:
        return ""
    innermost = marks[-1]
    return repr((innermost.offload, innermost.keep, innermost.outer))


def active_mark_key() -> str:
    """``mark_key(active_marks())``, without building it (called per graph call)."""
    if not MARKS.running():
        return ""
    MARKS.reads += 1
    return MARKS.keys[-1]
