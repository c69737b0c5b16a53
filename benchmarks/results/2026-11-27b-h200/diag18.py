"""Eighteenth session: what the measurement in turns (plain, plan, plan, plain; six each) reads where there is
no overhead: the plan's graph replaced by a second compile of plain Inductor, three runs; then auto 2 % and
5 % on the decoder with every measured call, and the fall-back where it happens."""
import sys, torch, offload_pass
from offload_pass import compiled_graph
from offload_pass.examples.models import make_decoder

calls = []
real_result = compiled_graph.CallMeasurement.result
def result(self):
    r = real_result(self)
    calls.append((self.plain, r))
    return r
compiled_graph.CallMeasurement.result = result

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
              f"plan {[round(t, 2) for t in c.measured.of_work_ms]} plain {[round(t, 2) for t in c.plain.of_work_ms] if c.plain else None}"
              f" fallback {p.fallback}")
    calls.clear()

real_compile_plain = compiled_graph.CompiledGraph._compile_plain
def twice(self, args):
    real_compile_plain(self, args)
    if self.plain is not None:
        self.compiled = self.replan.compile_plain(compiled_graph._inputs(args))
for rep in range(3):
    compiled_graph.CompiledGraph._compile_plain = twice
    b = offload_pass.make_backend(mode="auto", max_overhead=0.3)
    train(b, 44)
    compiled_graph.CompiledGraph._compile_plain = real_compile_plain
    show(b, f"== two plain compiles taking turns, run {rep}")
for m in (0.02, 0.05):
    b = offload_pass.make_backend(mode="auto", max_overhead=m)
    train(b, 140)
    show(b, f"== auto {m}")
