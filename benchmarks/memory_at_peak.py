"""What is alive on the GPU at the peak of one offloaded training step.

Records the CUDA caching allocator's history over one step (after warm-up),
replays it to find the peak, and prints the blocks alive there grouped by
where they were allocated (the offload_pass reload op, or the compiled graph's
code line). Used to check that the peak holds what the schedule intends.

  python benchmarks/memory_at_peak.py --layers 6 --hidden 2048 --seq 4096 --batch 2
"""

from __future__ import annotations

import argparse
import collections

import torch

import offload_pass
from offload_pass.models import make_decoder


def where(frames: list[dict]) -> str:
    for f in frames:
        name = f.get("filename", "")
        if "offload_pass/runtime.py" in name:
            return f"offload_pass.{f.get('name')}"
    for f in frames:
        name = f.get("filename", "")
        if "torchinductor" in name or "/tmp/" in name:
            return f"compiled:{f.get('name')}:{f.get('line')}"
    for f in frames:
        if "autograd" in f.get("filename", ""):
            return f"autograd:{f.get('name')}"
    return frames[0].get("name", "?") if frames else "?"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument("--max-inflight", type=int, default=2)
    p.add_argument("--baseline", action="store_true", help="no offload, plain inductor")
    args = p.parse_args()
    model = make_decoder(args.layers, args.hidden, args.heads, dtype=torch.bfloat16, device="cuda")
    if args.baseline:
        backend = "inductor"
    else:
        offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
        backend = offload_pass.make_backend(prefetch=args.prefetch, max_inflight=args.max_inflight)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(args.batch, args.seq, args.hidden, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        compiled(x).backward()
    torch.cuda.synchronize()
    model.zero_grad(set_to_none=True)
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    compiled(x).backward()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)

    live: dict[int, tuple[int, str]] = {}
    total = peak = 0
    peak_live: dict[int, tuple[int, str]] = {}
    peak_at = 0
    for i, ev in enumerate(snapshot["device_traces"][0]):
        if ev["action"] == "alloc":
            live[ev["addr"]] = (ev["size"], where(ev.get("frames", [])))
            total += ev["size"]
            if total > peak:
                peak, peak_live, peak_at = total, dict(live), i
        elif ev["action"] in ("free_requested",):
            size, _ = live.pop(ev["addr"], (0, ""))
            total -= size
    groups: dict[str, int] = collections.Counter()
    for size, origin in peak_live.values():
        groups[origin] += size
    print(f"peak over the step (allocated by the step): {peak / 2**20:.1f} MiB at event {peak_at}")
    for origin, size in groups.most_common(25):
        print(f"  {size / 2**20:9.1f} MiB  {origin}")


if __name__ == "__main__":
    main()
