"""The host's time in a synchronized training step, plain Inductor against
offload_pass: the host's wall time to issue the forward (median and least
of 20 synchronized steps, no profiler) and a cProfile of 10 more steps per
variant, written to OUT/cprofile_<variant>.txt (sorted by own time, then
by cumulative time): where the host spends what offloading adds.

  python benchmarks/host_profile.py OUT [--max-overhead 0.01] [bench_offload.py's model arguments]
  python benchmarks/host_profile.py OUT --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1

CUDA only. The offload_pass variant is ``mode="auto"`` with nothing marked.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_offload  # noqa: E402

import offload_pass  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--max-overhead", type=float, default=0.01)
    bench_offload.add_model_args(p)  # bench_offload's model arguments and defaults (the decoder)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("host_profile.py: needs a CUDA device (the host's time is measured against one)")
    os.makedirs(args.out, exist_ok=True)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    x = bench_offload.model_inputs(args, dtype)
    for variant in ("inductor", "offload_pass"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = bench_offload.build_model(args)
        backend = "inductor" if variant == "inductor" else offload_pass.make_backend(
            mode="auto", max_overhead=args.max_overhead
        )
        compiled = torch.compile(model, backend=backend)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            bench_offload.run_model(compiled, x).backward()

        for _ in range(14):  # compiles, calls 2-4 measured, a re-plan and its measured calls
            step()
        hosts = []
        for _ in range(20):
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            began = time.perf_counter()
            loss = bench_offload.run_model(compiled, x)
            hosts.append((time.perf_counter() - began) * 1e3)
            loss.backward()
            torch.cuda.synchronize()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(10):
            torch.cuda.synchronize()
            step()
            torch.cuda.synchronize()
        profiler.disable()
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("tottime").print_stats(45)
        stats.sort_stats("cumulative").print_stats(60)
        with open(os.path.join(args.out, f"cprofile_{variant}.txt"), "w") as f:
            f.write(text.getvalue())
        offloaded = backend.plans[-1].offloaded_bytes / 2**20 if variant == "offload_pass" else 0.0
        print(
            f"{variant}: host issues the forward in {statistics.median(hosts):.2f} ms (median of 20; least "
            f"{min(hosts):.2f}), {offloaded:.0f} MiB offloaded"
        )
        del compiled, model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
