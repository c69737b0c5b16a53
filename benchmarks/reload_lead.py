"""Where each reload runs: in the rewritten backward graph against the code
Inductor generates for it.

For every reload of the last compiled backward, prints the compute nodes
the graph puts between the reload and its ``wait_reload`` (the lead the
schedule and the step simulator count) and the kernels Inductor's
generated code runs between the two calls (the lead the device gets). A
reload with lead in the graph and none in the code stalls the compute
stream for its whole copy.

  python benchmarks/reload_lead.py --device cuda --mode auto --max-overhead 0.01
  python benchmarks/reload_lead.py --device cpu --layers 3 --hidden 64 --heads 4 --batch 2 --seq 32
"""

from __future__ import annotations

import argparse
import re

import torch

import offload_pass
from offload_pass.examples.models import make_decoder

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--mode", default="marks", help="marks (attention and MLP of every layer marked) or auto")
    p.add_argument("--max-overhead", type=float, default=0.02)
    p.add_argument("--steps", type=int, default=13, help="steps run (a re-plan compiles again on CUDA)")
    args = p.parse_args()
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = make_decoder(args.layers, args.hidden, args.heads, dtype=dtype, device=args.device)
    if args.mode == "auto":
        backend = offload_pass.make_backend(mode="auto", max_overhead=args.max_overhead, keep_graphs=True)
    else:
        offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
        backend = offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, keep_graphs=True)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(args.batch, args.seq, args.hidden, device=args.device, dtype=dtype)

    def steps() -> None:
        for _ in range(args.steps):
            model.zero_grad(set_to_none=True)
            compiled(x).sum().backward()

    with torch._inductor.config.patch(force_disable_caches=True):
        _, codes = run_and_get_code(steps)
    backward = [c for c in codes if "offload_pass.reload.default" in c][-1]
    record = backend.records[-1]
    print(record.plan.graph_id, record.plan.selection or "")
    in_code = code_lead(backward)
    print("| host copy | graph: compute nodes (matmul/attention) before the wait | code: kernels before the wait |")
    print("|---|---|---|")
    for source, (nodes, heavy) in graph_lead(record.graphs.backward).items():
        kernels = in_code.get(source)
        if kernels is None:
            print(f"| {source} | {nodes} ({heavy}) | not found in the generated code |")
            continue
        flag = " **no lead**" if nodes and not kernels else ""
        print(f"| {source} | {nodes} ({heavy}) | {kernels}{flag} |")


if __name__ == "__main__":
    main()
