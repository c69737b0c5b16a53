"""One host-pool buffer ("arena") and the slots it has handed out.

Takes: a host buffer page-locked (or not) by ``host_pool.py``, and the weak
references to the storages of the copies placed in its slots. Gives
``Arena``: how many of its bytes copies still hold (``bytes_in_use``) and
how to give the buffer back (``unregister``). It imports nothing of the
runtime, so ``state.py`` (which holds the arenas) and ``host_pool.py``
(which fills them) both may.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

__all__ = ["Arena", "expired"]


def expired(weak_ref: int) -> bool:
    """Is the storage behind ``weak_ref`` (``UntypedStorage._weak_ref()``) gone?"""
    return torch.UntypedStorage._expired(weak_ref)


@dataclasses.dataclass
class Arena:
    buffer: torch.Tensor  # uint8 host memory: a page more than ``nbytes``, to align ``base``
    base: int  # the first page boundary in it: the pool's ``nbytes`` start here
    nbytes: int
    pinned: bool
    # offset -> a weak reference to the storage of the copy last handed out
    # there, and the bytes that copy spans
    slots: dict[int, tuple[int, int]]
    node: Optional[int] = None  # the NUMA node its pages were bound to before page-locking (None: not bound)

    def bytes_in_use(self) -> int:
        return sum(n for ref, n in self.slots.values() if not expired(ref))

    def unregister(self) -> None:
        """Undo the page-locking and drop the slots' weak references, before
        the buffer is dropped."""
        for ref, _ in self.slots.values():
            torch.UntypedStorage._free_weak_ref(ref)
        self.slots.clear()
        if self.pinned:
            # A copy queued on a stream may still touch the buffer.
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaHostUnregister(self.base)
