"""python -m offload_pass.examples.demo: mark, compile, show the plan and the graph diff.

Compiles a small decoder with the blocks it gains from marked (attention and
MLP on a GPU; attention on the CPU, see ``_marks``), prints the plan and the
diff of the forward and backward graphs against the partitioner's, checks
the gradients against plain Inductor, and on a GPU prints the peak memory of
a step with and without offload.
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


def _marks(on_gpu: bool) -> tuple[tuple[str, ...], int, str]:
    """What to mark, ``min_bytes``, and why, for the demo's model size.

    On a GPU (hidden 1024, seq 2048) every attention and MLP block saves
    megabytes that are alive at the peak: both are marked, under the 1 MiB
    default ``min_bytes``. The CPU model (hidden 64, seq 32) saves tensors of
    tens of KiB: ``min_bytes=0`` lets them move at all, and only attention is
    marked, since the planner predicts that moving the MLPs' saved tensors
    would not lower this model's peak (``keep_if_no_gain`` would keep them and
    warn that the MLP marks moved nothing)."""
    if on_gpu:
        return ("layers.*.attn", "layers.*.mlp"), 1 << 20, "min_bytes=1 MiB (the default)"
    return ("layers.*.attn",), 0, (
        "min_bytes=0: every tensor of this small CPU model is under the 1 MiB default; "
        "only attention is marked: moving the MLPs' tensors would not lower its predicted peak"
    )


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
    patterns, min_bytes, why = _marks(on_gpu)
    marked = offload_pass.offload_modules(model, *patterns)
    print(f"marked: {', '.join(marked)} ({why})")
    backend = offload_pass.make_backend(min_bytes=min_bytes, keep_graphs=True)
    x = torch.randn(2, seq, hidden, device=args.device, dtype=dtype)

    loss, grads, peak = _step(model, backend, x)
    torch._dynamo.reset()
    ref_loss, ref_grads, ref_peak = _step(reference, "inductor", x)

    record = backend.records[-1]
    plan, graphs = record.plan, record.graphs
    print()
    print(record)
    print()
    print(offload_pass.graph_diff(graphs.forward_before, graphs.forward, "forward"))
    print(offload_pass.graph_diff(graphs.backward_before, graphs.backward, "backward"))
    same = torch.equal(loss, ref_loss) and all(torch.equal(grads[n], ref_grads[n]) for n in grads)
    print(backend.last_step())  # every graph of the step (graph breaks make several)
    print(f"offloaded: {len(plan.offloaded)} saved tensors, {plan.offloaded_bytes} bytes (the plan above)")
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
