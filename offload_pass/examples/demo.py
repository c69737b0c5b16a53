"""python -m offload_pass.examples.demo: mark, compile, show the plan and the graph diff.

Compiles a small decoder with its attention and MLP blocks marked, prints the
plan and the diff of the forward and backward graphs against the
partitioner's, checks the gradients against plain Inductor, and on a GPU
prints the peak memory of a step with and without offload.
"""

from __future__ import annotations

import argparse
import copy

import torch

import offload_pass
from offload_pass.examples.models import make_decoder
from offload_pass.units import mib


def _step(model, backend, x):
    compiled = torch.compile(model, backend=backend)
    model.zero_grad(set_to_none=True)
    compiled(x).backward()  # compile + warm-up
    if x.is_cuda:
        torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    model.zero_grad(set_to_none=True)
    loss = compiled(x)
    loss.backward()
    peak = None
    if x.is_cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}, peak


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_device = "cuda" if torch.cuda.is_available() else "cpu"
    p.add_argument("--device", default=default_device)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=None, help="default 64 on CPU, 1024 on GPU")
    p.add_argument("--seq", type=int, default=None, help="default 32 on CPU, 2048 on GPU")
    args = p.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    hidden = args.hidden or (1024 if on_gpu else 64)
    seq = args.seq or (2048 if on_gpu else 32)
    dtype = torch.bfloat16 if on_gpu else torch.float32

    model = make_decoder(args.layers, hidden, heads=8, dtype=dtype, device=args.device)
    reference = copy.deepcopy(model)
    marked = offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    print(f"marked: {', '.join(marked)}")
    backend = offload_pass.make_backend(min_bytes=0 if not on_gpu else 1 << 20, keep_graphs=True)
    x = torch.randn(2, seq, hidden, device=args.device, dtype=dtype)

    loss, grads, peak = _step(model, backend, x)
    torch._dynamo.reset()
    ref_loss, ref_grads, ref_peak = _step(reference, "inductor", x)

    plan = backend.plans[-1]
    graphs = backend.records[-1].graphs
    print()
    print(plan)
    print()
    print(offload_pass.graph_diff(graphs.forward_before, graphs.forward, "forward"))
    print(offload_pass.graph_diff(graphs.backward_before, graphs.backward, "backward"))
    same = torch.equal(loss, ref_loss) and all(torch.equal(grads[n], ref_grads[n]) for n in grads)
    print(backend.last_step())  # every graph of the step (graph breaks make several)
    print(f"loss and gradients identical to plain Inductor: {same}")
    if peak is not None:
        print(
            f"peak memory of a step: {mib(ref_peak):.1f} MiB without offload, "
            f"{mib(peak):.1f} MiB with offload ({mib(plan.offloaded_bytes):.1f} MiB offloaded)"
        )
    else:
        print("(no GPU: peak memory is printed when run on a CUDA device)")
    if not same:
        raise SystemExit("gradients differ from plain Inductor")


if __name__ == "__main__":
    main()
