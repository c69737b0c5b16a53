"""Where each reload runs: the compute nodes the rewritten backward graph
puts between a reload and its ``wait_reload`` (the lead the schedule counts),
and the kernels Inductor's generated code runs between the two calls (the
lead the device gets). Takes the rendered graph or the generated code as
text, gives a dict per host copy. Used by test_kernel_order.py and by
benchmarks/reload_lead.py."""

from __future__ import annotations

import re

_KERNEL = re.compile(r"extern_kernels\.|\.run\(|cpp_fused|torch\.ops\.aten\.")
_VIEWS = re.compile(r"= aten\.(view|permute|as_strided|t|expand|reshape|unsqueeze|squeeze|_unsafe_view|slice|select|alias|transpose)\(")


def graph_lead(graph_text: str) -> dict[str, tuple[int, int]]:
    """Host copy name -> (compute nodes, of them matmuls or attention)
    between its reload and its wait_reload in the rendered backward graph."""
    lines = graph_text.splitlines()
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"(\w+) = offload_pass\.reload\((\w+),", line)
        if not m:
            continue
        name, source = m.groups()
        end = next((j for j in range(i, len(lines)) if lines[j].startswith(f"offload_pass.wait_reload({name})")), None)
        if end is None:
            raise SystemExit(f"reload_lead: no wait_reload({name}) in the rendered backward graph")
        between = [x for x in lines[i + 1:end] if " = aten." in x and not _VIEWS.search(x)]
        heavy = [x for x in between if re.search(r"= aten\.(mm|bmm|addmm|_grouped_mm)\(|attention", x)]
        out[source] = (len(between), len(heavy))
    return out


def code_lead(code: str) -> dict[str, int]:
    """Host copy name -> kernels the generated code runs between its reload
    and its wait_reload (a reload's output is buffer N or, through a
    MultiOutput, N + 1)."""
    lines = [x.strip() for x in code.splitlines() if not x.strip().startswith("#")]
    out = {}
    for i, line in enumerate(lines):
        m = re.match(r"buf(\d+) = torch\.ops\.offload_pass\.reload\.default\((\w+),", line)
        if not m:
            continue
        n, source = int(m.group(1)), m.group(2)
        waits = (f"wait_reload.default(buf{n})", f"wait_reload.default(buf{n + 1})")
        end = next((j for j in range(i, len(lines)) if any(w in lines[j] for w in waits)), i)
        out[source] = sum(1 for x in lines[i + 1:end] if _KERNEL.search(x))
    return out
