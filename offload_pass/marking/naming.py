"""Naming: the qualified name, from the user's model root, of the module that
produced a node.

Takes: models the user marked (``remember_module_names``, called by the
marking API) and graph nodes with Dynamo's ``nn_module_stack``. Gives:
``module_name(node)``, e.g. ``model.layers.0.mlp``.

Dynamo names modules by the path from its frame's root: ``L['self'].layers[0]``
for ``model(x)``, ``L['args'][0].model.layers[0]`` for a Hugging Face model
whose ``forward(*args, **kwargs)`` a decorator wraps, and just ``gate`` in a
frame compiled on its own after a graph break. Its stack keys are the modules'
``id``s, so a module the user's model contains is named from the model root
whatever the frame; other modules fall back to the path, cleaned up.
"""

from __future__ import annotations

import re
import weakref
from typing import Optional

import torch.fx as fx
import torch.nn as nn

from offload_pass.registry import REGISTRY

__all__ = ["remember_module_names", "module_name", "clean_dynamo_path", "frame_root_name", "marked_roots"]


def _remember(obj: object, name: str, root: weakref.ref) -> None:
    """Record ``obj``'s name in ``REGISTRY.module_names`` (its entry goes when it dies)."""
    key = id(obj)
    names = REGISTRY.module_names
    known = names.get(key)
    if known is None or known[0]() is not obj:
        names[key] = (weakref.ref(obj, lambda _ref, key=key: REGISTRY.module_names.pop(key, None)), name, root)


def remember_module_names(model: nn.Module) -> None:
    """Record the qualified name of every submodule, parameter and buffer of
    ``model`` (the root the user marked): plan entries name modules from there."""
    root = weakref.ref(model)
    for name, module in model.named_modules(remove_duplicate=False):
        _remember(module, name, root)
    for name, tensor in (*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)):
        _remember(tensor, name, root)


def _entry(key: object) -> Optional[tuple[weakref.ref, str, weakref.ref]]:
    try:
        entry = REGISTRY.module_names.get(int(key))  # type: ignore[call-overload]
    except (TypeError, ValueError):  # older torch: stack keys are names, not ids
        return None
    return None if entry is None or entry[0]() is None else entry


def _remembered(key: object) -> Optional[str]:
    entry = _entry(key)
    return None if entry is None else entry[1]


def marked_roots(gm: fx.GraphModule) -> list[nn.Module]:
    """The remembered models (roots the user marked) whose modules or
    parameters a Dynamo graph uses."""
    roots: dict[int, nn.Module] = {}
    for node in gm.graph.nodes:
        keys = [id(getattr(node.meta.get("grapharg"), "example", None))]
        keys += list((node.meta.get("nn_module_stack") or {}).keys())
        for key in keys:
            entry = _entry(key)
            root = entry[2]() if entry is not None else None
            if root is not None:
                roots[id(root)] = root
    return list(roots.values())


def _strip_suffix(name: str, suffix: str) -> Optional[str]:
    """``name`` less ``suffix`` at a dot boundary, or None if it does not end so."""
    if not suffix:
        return name
    if name == suffix:
        return ""
    return name[: -len(suffix) - 1] if name.endswith("." + suffix) else None


# How Dynamo names the module whose forward a frame runs: ``self``, or the
# first argument of a decorated ``forward(*args, **kwargs)`` (Hugging Face).
_FRAME_ROOTS = ("L['self']", "L['args'][0]")


def frame_root_name(gm: fx.GraphModule) -> Optional[str]:
    """Qualified name of the module a Dynamo graph's frame is the forward of
    (``L['self']``), found from a remembered module or parameter that the
    graph reaches by a path from that root; None if none is remembered.

    A frame compiled on its own after a graph break names its own ops with no
    module at all; they belong to this one."""
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            grapharg = node.meta.get("grapharg")
            source = getattr(getattr(grapharg, "source", None), "name", None)
            source = source() if callable(source) else source
            name = _remembered(id(getattr(grapharg, "example", None)))
            if isinstance(source, str) and source.startswith(_FRAME_ROOTS) and name is not None:
                root = _strip_suffix(name, clean_dynamo_path(source))
                if root is not None:
                    return root
        stack = node.meta.get("nn_module_stack")
        if stack:
            for key, (path, *_rest) in stack.items():
                name = _remembered(key)
                if name is not None and isinstance(path, str) and path.startswith(_FRAME_ROOTS):
                    root = _strip_suffix(name, clean_dynamo_path(path))
                    if root is not None:
                        return root
    return None


def clean_dynamo_path(path: str) -> str:
    """``L['self'].layers[0].attn`` / ``L['args'][0]._modules['layers']['0']``
    -> ``layers.0.attn``: the path without the frame's root."""
    # The frame's root: a local, maybe indexed (a decorated forward(*args)).
    path = re.sub(r"^L\['[^']*'\](\[\d+\]|\['[^']*'\])*", "", path)
    # A compiled bound method names its module through "__self__".
    path = re.sub(r"^\.?__self__", "", path)
    path = re.sub(r"\._(modules|parameters|buffers)\b", "", path)
    path = re.sub(r"\['([^']*)'\]|\[(\d+)\]", lambda m: "." + (m.group(1) or m.group(2)), path)
    # Marked modules' forwards are wrappers; Dynamo names the module through
    # the wrapper's closure.
    path = re.sub(r"\.forward\.__closure__\.\d+\.cell_contents\.__self__", "", path)
    return path.lstrip(".")


def module_name(node: fx.Node, frame_prefix: str = "") -> str:
    """Qualified name of the innermost module ``node`` was traced in ("" if
    none). ``frame_prefix`` names the frame's root module where the module
    itself was never remembered (a model that was not marked). A node the
    partitioner moved from the backward into the forward (a layer norm's
    ``rstd / N``) has no module stack of its own: it is named by its forward
    op's (``fwd_nn_module_stack``, the same ``seq_nr`` by which its mark
    reached it)."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return frame_prefix
    key, (path, *_rest) = list(stack.items())[-1]
    remembered = _remembered(key)
    if remembered is not None:
        return remembered
    return ".".join(p for p in (frame_prefix, clean_dynamo_path(path)) if p)
