"""Dynamo cache lookup of a tiny HF Llama step, 16 modules marked or none (twenty-second session).

  python benchmarks/results/2026-11-27f-h200/guard_cost.py inductor|all
"""
import sys, time, torch, statistics
import offload_pass
from transformers import LlamaConfig, LlamaForCausalLM
from torch.profiler import profile, ProfilerActivity
which = sys.argv[1]
torch.manual_seed(0)
m = LlamaForCausalLM(LlamaConfig(num_hidden_layers=8, hidden_size=64, num_attention_heads=4, num_key_value_heads=4, vocab_size=128, intermediate_size=128, max_position_embeddings=64))
x = torch.randint(0, 128, (1, 32))
if which == "inductor":
    backend = "inductor"
else:
    if which == "all":
        offload_pass.offload_modules(m, *[f"model.layers.{i}.{p}" for i in range(8) for p in ("self_attn", "mlp")])
    backend = offload_pass.make_backend(min_bytes=0)
c = torch.compile(m, backend=backend)
def step():
    m.zero_grad(set_to_none=True)
    c(input_ids=x, labels=x).loss.backward()
for _ in range(50): step()
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(20): step()
agg = {}
for e in prof.events():
    if e.name in ("TorchDynamo Cache Lookup", "CompiledFunction", "Torch-Compiled Region: 0/0", "## Call CompiledFxGraph None ##") or e.name.startswith("Torch-Compiled Region"):
        agg.setdefault(e.name, []).append(e.cpu_time_total)
for k, v in sorted(agg.items()):
    print(which, k, len(v), "median us", round(statistics.median(v), 1))
ts=[]
for _ in range(50):
    t=time.perf_counter(); step(); ts.append((time.perf_counter()-t)*1e6)
print(which, "step us median", round(statistics.median(ts)))
