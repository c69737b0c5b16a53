"""What the planner chooses for a GPU-sized problem, on a CPU: predictions only.

    python benchmarks/plan_proxy.py [--scale 8] [--model decoder|hf_llama] [--bandwidth GBPS]
        [--variants "auto:0.01,auto:0.1,mark:layers.*.attn"]

A decoder ``--scale`` times narrower than the benchmarks' 6 x 2048 (seq
2048, batch 2, float32), or with ``--model hf_llama`` the benchmarks' HF
Llama (8 layers, ffn 5632, seq 4096, batch 1, transformers built from a
config) as narrow, is compiled on the CPU under a device profile that
keeps an H100's ratios for it: pinned copies at 53 GB/s each way, memory at
3000 GB/s, matmuls at 600 / ``scale`` TFLOP/s and launches at 5 / ``scale``
us (a layer ``scale`` times narrower does ``scale`` times fewer FLOPs per
byte it saves). Each variant's plan is printed as the step simulator
predicts it: copies, bytes offloaded, the peak and the step before and after
the rewrite. Nothing here is measured: it shows how the selection and the
schedules behave on a copy-bound forward, without a device, before the
device measures the same variants (``benchmarks/run_auto_h100.sh``).

``--bandwidth`` sets both copy bandwidths (GB/s) instead: where copies and
compute balance as on the device (HF Llama on the H100 copies as long as it
computes), the proxy's copies must be as fast relative to its compute.

Variants: ``auto:X`` (mode="auto", max_overhead=X), ``budget:F``
(mode="budget", memory_budget=F, offload alone), ``mark:PATTERN[+PATTERN]``
(those modules marked, keep_if_no_gain=False).
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

import offload_pass
from offload_pass.examples.models import make_decoder
from offload_pass.planning import cost_model


def proxy_profile(scale: float) -> cost_model.DeviceProfile:
    tflops = 600.0 / scale
    return cost_model.DeviceProfile(
        53.0, 53.0, {"float32": tflops, "bfloat16": tflops, "float16": tflops}, 3000.0, 5.0 / scale,
        f"H100 proxy, matmuls / {scale:g}",
    )


def plan_variant(variant: str, args: argparse.Namespace, x: torch.Tensor):
    kind, _, value = variant.partition(":")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = _hf_llama(args) if args.model == "hf_llama" else make_decoder(args.layers, args.hidden, args.heads)
    knobs: dict = {"disabled_passes": ("calibrate",)}
    if kind == "auto":
        knobs |= {"mode": "auto", "max_overhead": float(value)}
    elif kind == "budget":
        knobs |= {"mode": "budget", "memory_budget": float(value)}
    elif kind == "mark":
        offload_pass.offload_modules(model, *value.split("+"))
        knobs |= {"keep_if_no_gain": False}
    else:
        raise SystemExit(f"unknown variant {variant!r}: auto:X, budget:F or mark:PATTERN")
    backend = offload_pass.make_backend(**knobs)
    compiled = torch.compile(model, backend=backend)
    loss = compiled(input_ids=x, labels=x).loss if args.model == "hf_llama" else compiled(x).sum()
    loss.backward()
    return backend.plans[-1]


def _hf_llama(args: argparse.Namespace) -> torch.nn.Module:
    """The benchmarks' HF Llama (``bench_offload.hf_model``), ``--scale``
    times narrower in its MLP and vocabulary as in its width."""
    from bench_offload import hf_model

    narrow = argparse.Namespace(**vars(args), ffn=int(5632 / args.scale), vocab=_vocab(args), experts=0)
    return hf_model(narrow, torch.float32, device="cpu")


def _vocab(args: argparse.Namespace) -> int:
    return int(8192 / args.scale)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=8.0)
    p.add_argument("--model", default="decoder", choices=["decoder", "hf_llama"])
    p.add_argument("--bandwidth", type=float, default=None, help="copy bandwidth, GB/s, both ways")
    p.add_argument("--layers", type=int, default=None, help="default: 6 (decoder), 8 (hf_llama)")
    p.add_argument("--heads", type=int, default=None, help="default: 4 (decoder), 2 (hf_llama: head dim 128 at --scale 8)")
    p.add_argument("--seq", type=int, default=None, help="default: 2048 (decoder), 4096 (hf_llama)")
    p.add_argument("--batch", type=int, default=None, help="default: 2 (decoder), 1 (hf_llama)")
    p.add_argument(
        "--variants", default=None,
        help="default: auto at 1/2/5/10/30 %% and the attention marked (layers.*.attn; hf_llama: model.layers.*.self_attn)",
    )
    args = p.parse_args()
    hf = args.model == "hf_llama"
    if args.variants is None:
        attention = "model.layers.*.self_attn" if hf else "layers.*.attn"
        args.variants = f"auto:0.01,auto:0.02,auto:0.05,auto:0.1,auto:0.3,mark:{attention}"
    for name, decoder, llama in (("layers", 6, 8), ("heads", 4, 2), ("seq", 2048, 4096), ("batch", 2, 1)):
        if getattr(args, name) is None:
            setattr(args, name, llama if hf else decoder)
    args.hidden = int(2048 / args.scale)
    # The CPU's fixed figures are what a CPU graph is planned with: the proxy replaces them.
    cost_model._CPU_PROFILE = proxy_profile(args.scale)
    if args.bandwidth is not None:
        cost_model._CPU_PROFILE = dataclasses.replace(
            cost_model._CPU_PROFILE, d2h_gbps=args.bandwidth, h2d_gbps=args.bandwidth,
            source=f"{cost_model._CPU_PROFILE.source}, copies at {args.bandwidth:g} GB/s",
        )
    x = torch.randint(0, _vocab(args), (args.batch, args.seq)) if hf else torch.randn(args.batch, args.seq, args.hidden)
    print(f"{args.model} {args.layers} x {args.hidden}, seq {args.seq}, batch {args.batch}, float32, on the CPU; "
          f"profile: {cost_model._CPU_PROFILE.source} (predictions, nothing measured)")
    print("| variant | copies | offloaded MiB | predicted peak MiB | freed MiB | predicted step ms | overhead | "
          "waiting for copies, forward + backward ms | selection |")
    print("|---|---|---|---|---|---|---|---|---|")
    for variant in args.variants.split(","):
        plan = plan_variant(variant, args, x)
        before, after = plan.baseline, plan.prediction
        print(
            f"| {variant} | {len(plan.offloaded)} | {plan.offloaded_bytes / 2**20:.1f} | "
            f"{before.peak / 2**20:.1f} -> {after.peak / 2**20:.1f} | {(before.peak - after.peak) / 2**20:.1f} | "
            f"{before.step_ms:.3f} -> {after.step_ms:.3f} | {after.step_ms / before.step_ms - 1:+.1%} | "
            f"{after.forward_wait_ms:.2f} + {after.backward_wait_ms:.2f} | "
            f"{plan.selection or ''} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
