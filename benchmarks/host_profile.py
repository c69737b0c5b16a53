"""The host's time in a synchronized training step, plain Inductor against
offload_pass: the host's wall time to issue the forward (median and least
of 20 synchronized steps, no profiler) and a cProfile of 10 more steps per
variant, written to OUT/cprofile_<variant>.txt (sorted by own time, then
by cumulative time): where the host spends what offloading adds.

  python benchmarks/host_profile.py OUT [--max-overhead 0.01] [bench_offload.py's model arguments]
  python benchmarks/host_profile.py OUT --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1

CUDA only. The offload_pass variant is ``mode="auto"`` with nothing marked,
or ``--variant`` in bench_offload.py's form (``--variant
"offload_pass[none](mode=budget;memory_budget=0.6)"``); it runs
bench_offload.py's warm-up (``--warmup`` steps, then until no plan changes)
before anything is timed. Each variant's row also says what else used the
host's CPUs over the 20 timed steps (``host_load.py``).

``--breakdown`` splits the offload_pass forward's host time further, each
row the median of 20 synchronized forwards of the same compiled graphs with
a part of the runtime ops timed or stubbed out (the gradients of those steps
are garbage; nothing is checked, only the host's time is read): ``timed
inside`` puts a clock around the offload's body and its parts (nested: a
part's time is also in the body's); ``each copy 4 KiB`` launches every copy
as before but of its first 4 KiB only (the host's calls alike, next to no
copy traffic); ``no copy`` replaces the copy's launch (stream switch, events,
``copy_``) by a recorded event; ``no copy, no slot`` also hands out one
host tensor per slot, made once; ``no offload body`` returns that tensor
straight away. What is left against plain Inductor is the dispatcher and
the graph's own code around the ops. The generated code's calls are
counted per graph (OUT/generated_<variant>.txt).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import re
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_offload  # noqa: E402
import host_load  # noqa: E402

import offload_pass  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--max-overhead", type=float, default=0.01)
    p.add_argument("--variant", default=None, help="the offload_pass variant, as bench_offload.py names it")
    p.add_argument("--warmup", type=int, default=18, help="steps before the settling steps and the timed ones")
    p.add_argument("--breakdown", action="store_true", help="split the forward's host time (see above)")
    bench_offload.add_model_args(p)  # bench_offload's model arguments and defaults (the decoder)
    args = p.parse_args()
    if args.variant is not None and bench_offload.variant_mark(args.variant, "none") != "none":
        p.error(f"--variant {args.variant!r}: only offload_pass[none] (nothing marked) is supported")
    if not torch.cuda.is_available():
        raise SystemExit("host_profile.py: needs a CUDA device (the host's time is measured against one)")
    os.makedirs(args.out, exist_ok=True)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    x = bench_offload.model_inputs(args, dtype)
    for variant in ("inductor", "offload_pass"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = bench_offload.build_model(args)
        settings = (
            {"mode": "auto", "max_overhead": args.max_overhead} if args.variant is None
            else bench_offload.parse_overrides(args.variant)
        )
        backend = "inductor" if variant == "inductor" else offload_pass.make_backend(**settings)
        compiled = torch.compile(model, backend=backend)

        def step() -> None:
            model.zero_grad(set_to_none=True)
            bench_offload.run_model(compiled, x).backward()

        for _ in range(args.warmup):
            step()
            torch.cuda.synchronize()
        if variant == "offload_pass":
            bench_offload.steps_until_settled(lambda: (step(), torch.cuda.synchronize()), backend, limit=4 * args.warmup + 200)
        load_before = host_load.snapshot()
        def host_forwards() -> list[float]:
            hosts = []
            for _ in range(20):
                model.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                began = time.perf_counter()
                loss = bench_offload.run_model(compiled, x)
                hosts.append((time.perf_counter() - began) * 1e3)
                loss.backward()
                torch.cuda.synchronize()
            return hosts

        hosts = host_forwards()
        load = host_load.describe(load_before, host_load.snapshot())
        _count_generated(args.out, variant)
        if args.breakdown and variant == "offload_pass":
            _breakdown(host_forwards, statistics.median(hosts))
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
            f"{min(hosts):.2f}), {offloaded:.0f} MiB offloaded; host load {load}"
        )
        del compiled, model
        torch.cuda.empty_cache()


def _count_generated(out: str, variant: str) -> None:
    """Per graph Inductor generated this run: its calls of each kind (kernel
    launches, extern kernels, buffer allocations, our ops) in ``call``."""
    from torch._inductor.codecache import PyCodeCache

    kinds = {
        "launch": r"\.run\(", "extern": r"extern_kernels\.", "alloc": r"empty_strided_cuda\(",
        "reinterpret": r"reinterpret_tensor\(", "offload_pass op": r"torch\.ops\.offload_pass\.",
        "del": r"^\s*del ", "assert": r"assert_size_stride\(",
    }
    lines = []
    for module in PyCodeCache.modules:  # the modules loaded since the last variant (cleared below)
        path = getattr(module, "__file__", None)
        if not path or not os.path.exists(path):
            continue
        text = open(path).read()
        body = text.split("def call(", 1)[-1] if "def call(" in text else ""
        if not body:
            continue
        counts = {k: len(re.findall(v, body, flags=re.M)) for k, v in kinds.items()}
        lines.append(f"{os.path.basename(path)}: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    with open(os.path.join(out, f"generated_{variant}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    PyCodeCache.modules.clear()


def _breakdown(host_forwards, median_ms: float) -> None:
    """The forward's host time with parts of the runtime ops timed or stubbed out."""
    import offload_pass.runtime.ops as ops

    timed_names = ("_copy_out", "host_buffer", "_copy_on", "_copy_layout", "_compute_stream_waits")
    originals = {name: getattr(ops, name) for name in timed_names}
    clock = dict.fromkeys(timed_names, 0.0)
    calls = dict.fromkeys(timed_names, 0)

    def timed(name):
        inner = originals[name]

        def wrapper(*a, **k):
            began = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                clock[name] += time.perf_counter() - began
                calls[name] += 1
        return wrapper

    done = torch.cuda.Event()
    done.record()
    slots: dict = {}

    def no_copy(streams, stream, dst, src, after):
        return done

    def small_copy(streams, stream, dst, src, after):
        n = min(4096 // src.element_size(), src.numel())
        return originals["_copy_on"](
            streams, stream, dst.as_strided((n,), (1,), dst.storage_offset()),
            src.as_strided((n,), (1,), src.storage_offset()), after,
        )

    def one_slot(x, pin_memory, pool, pool_bytes, offset, slot_bytes):
        key = (pool, offset, tuple(x.shape), tuple(x.stride()), x.dtype)
        if key not in slots:
            slots[key] = originals["host_buffer"](x, pin_memory, "", 0, 0, 0)
        return slots[key]

    def no_body(x, pin_memory, host_limit, pool, pool_bytes, offset, slot_bytes):
        return one_slot(x, pin_memory, pool, pool_bytes, offset, slot_bytes)

    rows = [("as compiled", median_ms)]
    try:
        for name in timed_names:
            setattr(ops, name, timed(name))
        hosts = host_forwards()
        n = max(calls["_copy_out"], 1)
        parts = ", ".join(
            f"{name} {clock[name] / n * 1e6:.1f} us ({calls[name] / n:.0f}x)" for name in timed_names
        )
        rows.append((f"timed inside, per offload ({n / 20:.0f} a forward; nested): {parts}", statistics.median(hosts)))
        for name in timed_names:
            setattr(ops, name, originals[name])
        ops._copy_on = small_copy
        rows.append(("each copy 4 KiB (the same launches, next to no traffic)", statistics.median(host_forwards())))
        ops._copy_on = no_copy
        rows.append(("no copy (no stream switch, events, copy_)", statistics.median(host_forwards())))
        ops.host_buffer = one_slot
        rows.append(("no copy, no slot", statistics.median(host_forwards())))
        ops._copy_out = no_body
        rows.append(("no offload body", statistics.median(host_forwards())))
    finally:
        for name, fn in originals.items():
            setattr(ops, name, fn)
        ops._copy_on = originals["_copy_on"]
    for label, ms in rows:
        print(f"  breakdown: {ms:.2f} ms  {label}")


if __name__ == "__main__":
    main()
