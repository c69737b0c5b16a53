"""HF Llama (fp32, small) on the GPU: each step's gradients against plain Inductor's (and plain Inductor against itself)."""
import argparse, sys, contextlib
sys.path.insert(0, "benchmarks")
import torch, offload_pass
import bench_offload as b
from torch.nn.attention import sdpa_kernel, SDPBackend
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 50
args = argparse.Namespace(model="hf_llama", layers=2, hidden=512, heads=8, vocab=2048, seq=1024, ffn=1408, experts=0, batch=2)
x = torch.randint(0, args.vocab, (2, 1024), generator=torch.Generator().manual_seed(1)).cuda()
def run(backend, mark, ctx):
    torch._dynamo.reset(); torch.manual_seed(0)
    model = b.hf_model(args, torch.float32)
    if mark:
        offload_pass.offload_modules(model, "model.layers.*.self_attn", "model.layers.*.mlp")
    compiled = torch.compile(model, backend=backend)
    out = []
    with ctx():
        for _ in range(STEPS):
            model.zero_grad(set_to_none=True)
            compiled(input_ids=x, labels=x).loss.backward()
            out.append({k: p.grad.detach().clone() for k, p in model.named_parameters()})
    torch.cuda.synchronize()
    return out
def compare(got, want):
    bad = [i + 1 for i, (g, w) in enumerate(zip(got, want)) if any(not torch.equal(g[k], w[k]) for k in w)]
    rel = max(((g[k] - w[k]).abs().max() / w[k].abs().max().clamp_min(1e-30)).item() for g, w in zip(got, want) for k in w)
    return f"{STEPS - len(bad)}/{STEPS} steps torch.equal (first differing {bad[:3]}), max rel diff {rel:.2e}"
import os
torch.use_deterministic_algorithms(True, warn_only=True)
for label, ctx in [("math sdpa, deterministic", lambda: sdpa_kernel(SDPBackend.MATH))]:
    want = run("inductor", False, ctx)
    print(f"[{label}] inductor again: {compare(run('inductor', False, ctx), want)}", flush=True)
    base = run(offload_pass.make_backend(disabled_passes=("offload",)), True, ctx)
    print(f"[{label}] offload_pass, rewrite off, against inductor: {compare(base, want)}", flush=True)
    for name, kw, mark in [("defaults", {}, True),
                            ("reload_headroom=0.5", {"reload_headroom": 0.5}, True),
                            ("auto 30%", {"mode": "auto", "max_overhead": 0.3}, False)]:
        be = offload_pass.make_backend(**kw)
        got = run(be, mark, ctx)
        p = be.plans[-1]
        print(f"[{label}] {name}: plans {len(be.plans)} offloaded {p.offloaded_bytes/2**20:.1f} MiB headroom {p.reload_headroom} "
              f"replan {p.replan_reason}: vs inductor {compare(got, want)}; vs rewrite off {compare(got, base)}", flush=True)
