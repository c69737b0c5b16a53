"""Graph text: stable, readable renderings of graphs, and their diffs.

Takes: an FX graph module. Gives: one line per node with its name, op,
arguments, device, dtype and shape, and ``[offload_pass]`` on nodes the pass
made; ``graph_diff`` gives a unified diff of two renderings. The golden-file
tests and the demo's graph diff both use these.
"""

from __future__ import annotations

import difflib

import torch
import torch.fx as fx

from offload_pass.meta_keys import CREATED_BY_KEY

__all__ = ["render_graph", "graph_diff"]

_DTYPES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.bool: "b8", torch.uint8: "u8", torch.int8: "i8",
}


def _fmt_arg(a: object) -> str:
    if isinstance(a, fx.Node):
        return a.name
    if isinstance(a, (list, tuple)):
        inner = ", ".join(_fmt_arg(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    if isinstance(a, torch.device):
        return a.type
    if isinstance(a, torch.dtype):
        return _DTYPES.get(a, str(a).replace("torch.", ""))
    return repr(a)


def _fmt_val(val: object) -> str:
    if isinstance(val, torch.Tensor):
        shape = ", ".join(str(s) for s in val.shape)
        return f"{val.device.type} {_DTYPES.get(val.dtype, str(val.dtype))}[{shape}]"
    if isinstance(val, (list, tuple)):
        return "(" + ", ".join(_fmt_val(v) for v in val) + ")"
    if val is None:
        return ""
    return type(val).__name__


def _fmt_target(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        name = target._schema.name.replace("::", ".")
        overload = target._overloadname
        return name if overload == "default" else f"{name}.{overload}"
    return getattr(target, "__name__", str(target))


def render_graph(gm: fx.GraphModule | fx.Graph) -> str:
    graph = gm.graph if isinstance(gm, fx.GraphModule) else gm
    lines = []
    for node in graph.nodes:
        mark = "  [offload_pass]" if node.meta.get(CREATED_BY_KEY) else ""
        val = _fmt_val(node.meta.get("val"))
        if node.op == "placeholder":
            line = f"{node.name}: input  {val}"
        elif node.op == "output":
            line = f"return {_fmt_arg(node.args[0])}"
        else:
            args = [_fmt_arg(a) for a in node.args]
            args += [f"{k}={_fmt_arg(v)}" for k, v in node.kwargs.items()]
            call = f"{_fmt_target(node)}({', '.join(args)})"
            line = f"{node.name} = {call}  {val}" if val else call
        lines.append(line.rstrip() + mark)
    return "\n".join(lines) + "\n"


def graph_diff(before: str, after: str, name: str = "graph") -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{name} (before)",
            tofile=f"{name} (after offload_pass)",
        )
    )
