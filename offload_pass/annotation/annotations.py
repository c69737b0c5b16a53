"""Stage 2, node annotations: marks on the joint graph, as plain requests.

Takes: the joint forward/backward graph, whose nodes carry the markers'
``meta["custom"]``. Gives: ``node.meta[REQUEST_KEY]``, a ``Request`` saying what
the user asked for the tensors that node produces (the plan records what was
chosen under ``meta_keys.CHOSEN_KEY``), and ``node.meta[TENSOR_REQUEST_KEY]`` for
per-tensor marks, moved from the marking view onto the tensor it views before
Inductor's no-op removal deletes that view.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

from offload_pass.marking.mark import ALL_ROLES, Mark
from offload_pass.meta_keys import MARK_KEY, REQUEST_KEY, TENSOR_MARK_KEY, TENSOR_REQUEST_KEY
from offload_pass.views import is_view_node, view_base

__all__ = [
    "Request",
    "annotate_requests",
    "harvest_tensor_marks",
    "marks_digest",
]



@dataclasses.dataclass(frozen=True)
class Request:
    """A module or region mark as it reached one node."""

    offload: Optional[tuple[str, ...]]
    keep: Optional[tuple[str, ...]]
    source: str
    outer: tuple["Request", ...] = ()  # marks of enclosing modules, innermost first
    # The marked module's forward ran eagerly around this graph's frame (a
    # graph break inside it or around it): the graph may hold only part of it.
    eager: bool = dataclasses.field(default=False, compare=False)

    def opinion_and_source(self, role: Optional[str]) -> tuple[Optional[str], str]:
        """"keep", "offload" or None for a tensor of sub-op ``role``, and the
        source of the mark that said it. A mark restricted to roles says
        nothing about tensors outside those roles; those follow the enclosing
        marks."""
        def covers(roles: Optional[tuple[str, ...]]) -> bool:
            if roles is None:
                return False
            return roles == ALL_ROLES or (role is not None and role in roles)

        for request in (self, *self.outer):
            if covers(request.keep):
                return "keep", request.source
            if covers(request.offload):
                return "offload", request.source
        return None, ""

    @property
    def roles(self) -> tuple[str, ...]:
        named = set()
        for roles in (self.offload, self.keep):
            if roles and roles != ALL_ROLES:
                named.update(roles)
        return tuple(sorted(named))


def _request_of(custom: object) -> Optional[Request]:
    if not isinstance(custom, dict):
        return None
    mark = custom.get(MARK_KEY)
    if not isinstance(mark, dict):
        return None
    return _request_from_mark(Mark.from_custom(mark))


def _request_from_mark(mark: Mark) -> Request:
    return Request(
        offload=mark.offload,
        keep=mark.keep,
        source=mark.source,
        outer=tuple(_request_from_mark(m) for m in mark.outer),
    )


def annotate_requests(graph: fx.Graph, enclosing: Optional[Mark] = None) -> int:
    """Set REQUEST_KEY on every node under a mark; returns how many.

    ``enclosing`` is the mark of a module whose forward ran this graph's
    frame from outside it (after a graph break): it applies to every node
    that carries no mark of its own, and its requests say ``eager``."""
    count = 0
    fallback = _request_from_mark(enclosing) if enclosing else None
    for node in graph.nodes:
        request = _request_of(node.meta.get("custom")) or fallback
        if request is not None and fallback is not None and request.source == fallback.source:
            request = dataclasses.replace(request, eager=True)
        if request is not None:
            node.meta[REQUEST_KEY] = request
            count += 1
    return count


def harvest_tensor_marks(graph: fx.Graph) -> int:
    """Move per-tensor marks from their marking view to the viewed tensor."""
    count = 0
    for node in graph.nodes:
        custom = node.meta.get("custom")
        if not isinstance(custom, dict) or TENSOR_MARK_KEY not in custom:
            continue
        if not is_view_node(node):
            continue
        base = view_base(node)
        mode = custom[TENSOR_MARK_KEY]
        for target in (node, base):
            if target is not None:
                marks = set(target.meta.get(TENSOR_REQUEST_KEY, ()))
                marks.add(mode)
                target.meta[TENSOR_REQUEST_KEY] = frozenset(marks)
        count += 1
    return count


class TensorMarkPass(CustomGraphPass):
    """Inductor joint pre-pass running ``harvest_tensor_marks``."""

    def __call__(self, graph: fx.Graph) -> None:
        harvest_tensor_marks(graph)

    def uuid(self) -> bytes:
        return get_hash_for_files((__file__,))


def marks_digest(gm: fx.GraphModule) -> str:
    """Hash of every mark in a Dynamo graph, in node order: part of the
    compile cache key, so changed marks never hit a stale compiled graph."""
    h = hashlib.sha256()
    for node in gm.graph.nodes:
        custom = node.meta.get("custom")
        if isinstance(custom, dict) and (MARK_KEY in custom or TENSOR_MARK_KEY in custom):
            h.update(repr((node.name, custom.get(MARK_KEY), custom.get(TENSOR_MARK_KEY))).encode())
    return h.hexdigest()[:16]
