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

__all__ = ["remember_module_names", "module_name", "clean_dynamo_path"]

# id(module) -> (weak reference to it, qualified name from the marked root).
# The weak reference tells a live module from a dead one whose id was reused.
_NAMES: dict[int, tuple[weakref.ref, str]] = {}


def remember_module_names(model: nn.Module) -> None:
    """Record the qualified name of every submodule of ``model`` (the root the
    user marked): plan entries name modules from there."""
    for name, module in model.named_modules(remove_duplicate=False):
        key = id(module)
        known = _NAMES.get(key)
        if known is None or known[0]() is not module:
            _NAMES[key] = (weakref.ref(module, lambda _ref, key=key: _NAMES.pop(key, None)), name)


def _remembered(key: str) -> Optional[str]:
    try:
        entry = _NAMES.get(int(key))
    except ValueError:  # older torch: stack keys are names, not ids
        return None
    if entry is None or entry[0]() is None:
        return None
    return entry[1]


def clean_dynamo_path(path: str) -> str:
    """``L['self'].layers[0].attn`` / ``L['args'][0]._modules['layers']['0']``
    -> ``layers.0.attn``: the path without the frame's root."""
    # The frame's root: a local, maybe indexed (a decorated forward(*args)).
    path = re.sub(r"^L\['[^']*'\](\[\d+\]|\['[^']*'\])*", "", path)
    # A compiled bound method names its module through "__self__".
    path = re.sub(r"^\.?__self__", "", path)
    path = path.replace("._modules", "")
    path = re.sub(r"\['([^']*)'\]|\[(\d+)\]", lambda m: "." + (m.group(1) or m.group(2)), path)
    # Marked modules' forwards are wrappers; Dynamo names the module through
    # the wrapper's closure.
    path = re.sub(r"\.forward\.__closure__\.\d+\.cell_contents\.__self__", "", path)
    return path.lstrip(".")


def module_name(node: fx.Node, frame_prefix: str = "") -> str:
    """Qualified name of the innermost module ``node`` was traced in ("" if
    none). ``frame_prefix`` names the frame's root module where the module
    itself was never remembered (a model that was not marked)."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return frame_prefix
    key, (path, *_rest) = list(stack.items())[-1]
    remembered = _remembered(key)
    if remembered is not None:
        return remembered
    return ".".join(p for p in (frame_prefix, clean_dynamo_path(path)) if p)
