"""Seventeenth session, call B: (1) two plain Inductor compiles taking turns (the plan's graph replaced by a second
plain compile): the overhead the interleaved measurement reads where there is none; (2) every measured call of the
decoder under auto 2 % (plain and plan); (3) the CUDA auto test's gradients step by step."""
import sys, json, dataclasses, torch, offload_pass
from offload_pass import compiled_graph
from offload_pass.examples.models import make_decoder

calls = []
real_result = compiled_graph.CallMeasurement.result
def result(self):
    r = real_result(self)
    calls.append((self.plain, r))
    return r
compiled_graph.CallMeasurement.result = result

def row(tag, r):
    print(f"  {tag:5s} call {r.call:3d} fwd {r.forward_ms:7.2f} bwd {r.backward_ms:7.2f} work {r.forward_ms + r.backward_ms:7.2f} "
          f"host_f {r.host_forward_ms or 0:6.2f} host_b {r.host_backward_ms or 0:6.2f} out {r.outside_ms if r.outside_ms is not None else -1:5.2f} "
          f"wait {r.forward_wait_ms + r.backward_wait_ms:5.2f}")

def train(backend, steps, layers=6, hidden=2048, batch=2):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = make_decoder(layers, hidden, 16, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(batch, 4096, hidden, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(model, backend=backend)
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        compiled(x).backward()
        torch.cuda.synchronize()

def show(backend, title):
    print(title)
    for p in backend.plans:
        c = p.measured
        if c is None:
            print("  plan", p.graph_id, "not measured"); continue
        print(f"  {p.graph_id} reason {p.replan_reason} offloaded {p.offloaded_bytes/2**20:.0f} MiB overhead "
              f"{c.measured_overhead if c.measured_overhead is None else format(c.measured_overhead, '+.2%')} "
              f"plan {c.measured.of_work_ms} plain {c.plain.of_work_ms if c.plain else None}")
    for plain, r in calls:
        row("plain" if plain else "plan", r)
    calls.clear()

# (1) two plains
real_compile_plain = compiled_graph.CompiledGraph._compile_plain
def twice(self, args):
    real_compile_plain(self, args)
    if self.plain is not None:
        self.compiled = self.replan.compile_plain(compiled_graph._inputs(args))
for rep in range(2):
    compiled_graph.CompiledGraph._compile_plain = twice
    b = offload_pass.make_backend(mode="auto", max_overhead=0.3)
    train(b, 44)
    compiled_graph.CompiledGraph._compile_plain = real_compile_plain
    show(b, f"== two plain compiles taking turns, run {rep}")

# (2) auto 2 %
for m in (0.02, 0.05):
    b = offload_pass.make_backend(mode="auto", max_overhead=m)
    train(b, 130)
    show(b, f"== auto {m}")

# (3) the CUDA test's gradients, step by step
def run(backend, steps=18):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = make_decoder(layers=2, hidden=256, heads=4).cuda()
    x = torch.randn(4, 512, 256, generator=torch.Generator().manual_seed(1)).cuda()
    compiled = torch.compile(model, backend=backend)
    grads = []
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        compiled(x).backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    return grads, model, x
compiled_graph.FIRST_MEASURED_CALL = 6
b = offload_pass.make_backend(mode="auto", max_overhead=0.05, min_bytes=0)
got, model, x = run(b)
show(b, "== CUDA test (calls from 6)")
for p in b.plans:
    print(p)
want, _, _ = run("inductor")
eager_model = make_decoder(layers=2, hidden=256, heads=4).cuda()
torch.manual_seed(0); eager_model = make_decoder(layers=2, hidden=256, heads=4).cuda().double()
eager_model(x.double()).backward()
ref = {n: p.grad for n, p in eager_model.named_parameters()}
for step, (g, w) in enumerate(zip(got, want), 1):
    bad = [n for n in w if not torch.equal(g[n], w[n])]
    diff = max(((g[n] - w[n]).abs().max().item() for n in w), default=0)
    plain_err = max((w[n].double() - ref[n]).abs().max().item() for n in w)
    print(f"step {step:2d}: {len(bad)} differ, max |plan-plain| {diff:.3e}, max |plain-fp64| {plain_err:.3e} {bad[:4]}")
