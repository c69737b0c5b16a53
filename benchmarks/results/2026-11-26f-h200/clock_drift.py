"""Does a step after the GPU idled run faster than under sustained load? Plain Inductor, decoder."""
import statistics, subprocess, sys, time
sys.path.insert(0, "benchmarks")
import torch
import bench_offload as b
import argparse
p = argparse.ArgumentParser(); b.add_model_args(p); args = p.parse_args([])
torch.manual_seed(0)
model = b.build_model(args)
x = b.model_inputs(args, torch.bfloat16)
compiled = torch.compile(model)
def step():
    model.zero_grad(set_to_none=True)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); b.run_model(compiled, x).backward(); e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e)
def smi():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu", "--format=csv,noheader"], capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception as err:
        return str(err)
for _ in range(30): step()
for idle in (10, 5):
    time.sleep(idle)
    first = [step() for _ in range(12)]
    print(f"after {idle}s idle, steps 1-12:", " ".join(f"{t:.2f}" for t in first), "|", smi(), flush=True)
t0 = time.time(); window = []; w0 = t0
while time.time() - t0 < 30:
    window.append(step())
    if time.time() - w0 > 3:
        print(f"t={time.time()-t0:5.1f}s sustained: median {statistics.median(window):.2f} n={len(window)} | {smi()}", flush=True)
        window = []; w0 = time.time()
