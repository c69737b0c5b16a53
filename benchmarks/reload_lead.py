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
import os
import sys

import torch

import offload_pass
from offload_pass.examples.models import make_decoder

# The lead readers live beside the test that holds the generated code to them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from kernel_lead import code_lead, graph_lead  # noqa: E402


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
