"""Eighteenth session, call D: what the live measurement (turns of six, median of adjacent pairs) reads where there
is no overhead: the plan's graph replaced by a second compile of plain Inductor, six runs."""
import torch, offload_pass
from offload_pass import compiled_graph
from offload_pass.examples.models import make_decoder

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

real_compile_plain = compiled_graph.CompiledGraph._compile_plain
def twice(self, args):
    real_compile_plain(self, args)
    if self.plain is not None:
        self.compiled = self.replan.compile_plain(compiled_graph._inputs(args))
compiled_graph.CompiledGraph._compile_plain = twice
for rep in range(6):
    b = offload_pass.make_backend(mode="auto", max_overhead=0.3)
    train(b, 44)
    c = b.plans[0].measured
    print(f"run {rep}: measured_overhead {c.measured_overhead:+.2%} pairs {[f'{r - 1:+.1%}' for r in c.pair_ratios]} "
          f"plain {[round(t, 2) for t in c.plain.of_work_ms]} second {[round(t, 2) for t in c.measured.of_work_ms]}", flush=True)
