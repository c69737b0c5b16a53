"""Which steps' gradients differ from plain Inductor's, under which plan (the CUDA calibration test's model)."""
import sys, torch
import offload_pass
from offload_pass import compiled_graph
from offload_pass.examples.models import make_decoder

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 18
NOCACHE = "nocache" in sys.argv
EXTRAS = "extras" in sys.argv
if NOCACHE:
    import torch._inductor.config
    torch._inductor.config.force_disable_caches = True
print("nocache", NOCACHE, "extras", EXTRAS)
from offload_pass.runtime import ops as _ops
from offload_pass.runtime.state import STATE as _S
MISSES = {"release": 0, "wait_reload": 0, "calls": 0}
_orig = _ops._compute_stream_waits
def _checked(x, events, key):
    if x.is_cuda:
        MISSES["calls"] += 1
        if key not in events:
            MISSES["release" if events is _S.copy_out_events else "wait_reload"] += 1
    return _orig(x, events, key)
_ops._compute_stream_waits = _checked

def run(backend, steps=STEPS, first=None):
    if first is not None:
        compiled_graph.FIRST_MEASURED_CALL = first
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = make_decoder(layers=2, hidden=256, heads=4).cuda()
    if backend != "inductor":
        offload_pass.offload_modules(model, "layers.*.attn", "layers.*.mlp")
    x = torch.randn(4, 512, 256, generator=torch.Generator().manual_seed(1)).cuda()
    compiled = torch.compile(model, backend=backend)
    out = []
    for step in range(steps):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if EXTRAS:
            torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        compiled(x).backward()
        if EXTRAS:
            end.record()
        torch.cuda.synchronize()
        n = len(backend.records) if backend != "inductor" else 0
        out.append((n, {k: p.grad.detach().clone() for k, p in model.named_parameters()}))
    compiled_graph.FIRST_MEASURED_CALL = 6
    return out

want = run("inductor")
configs = {} if "short" in sys.argv else {
    "default (calls 6-8)": lambda: offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False),
    "calibrate disabled": lambda: offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, disabled_passes=("calibrate",)),
    "calls 2-4": (lambda: offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False), 2),
    "host_pool disabled": lambda: offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False, disabled_passes=("host_pool",)),
}
configs = configs or {"default (calls 6-8)": lambda: offload_pass.make_backend(min_bytes=0, keep_if_no_gain=False)}
for name, make in configs.items():
    first = None
    if isinstance(make, tuple):
        make, first = make
    backend = make()
    from torch._inductor.utils import run_and_get_code
    got, codes = run_and_get_code(run, backend, first=first)
    sys.path.insert(0, "diag")
    from order_check import check
    import os
    for gi, src in enumerate(codes):
        if os.environ.get("OUT"):
            open(os.path.join(os.environ["OUT"], f"code_{name.split()[0]}_{gi}.py"), "w").write(src)
    for n, never, bad in check(codes):
        print("    generated code: reloads", n, "never waited", never, "read before their wait", len(bad), bad[:4])
    row = []
    for step, ((n, g), (_, w)) in enumerate(zip(got, want), 1):
        bad = [(k, (g[k] - w[k]).abs().max().item() / w[k].abs().max().item()) for k in w if not torch.equal(g[k], w[k])]
        worst = max(bad, key=lambda t: t[1]) if bad else None
        row.append(f"{step}:{n}:" + ("ok" if not bad else f"{len(bad)}bad({worst[0]} rel {worst[1]:.1e})"))
    print("misses", MISSES, "stats", offload_pass.runtime.stats())
    print(name, "| plans", [str(p.replan_reason) for p in backend.plans], "| offloaded", [len(p.offloaded) for p in backend.plans])
    print("   ", " ".join(row))

late = run("inductor")
print("inductor first vs inductor after the offload runs:", all(torch.equal(a[1][k], b[1][k]) for a, b in zip(want, late) for k in a[1]))
for k in want[-1][1]:
    if not torch.equal(want[-1][1][k], late[-1][1][k]):
        d = (want[-1][1][k] - late[-1][1][k]).abs().max().item(); print("   ", k, d, d / want[-1][1][k].abs().max().item())
print("tf32", torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())

