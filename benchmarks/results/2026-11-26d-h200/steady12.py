"""Per-step synchronized times of plain Inductor over a long run, with idle gaps:
does the device slow down under sustained load (clocks), and by how much?"""
import argparse, sys, time, statistics, json
import torch
sys.path.insert(0, "benchmarks")
import bench_offload as B

p = argparse.ArgumentParser(); B.add_model_args(p)
p.add_argument("--steps", type=int, default=200); p.add_argument("--json")
args = p.parse_args()
torch._inductor.config.force_disable_caches = True
dtype = torch.bfloat16
torch.manual_seed(0)
x = B.model_inputs(args, dtype)
model = B.build_model(args)
compiled = torch.compile(model)
def step():
    model.zero_grad(set_to_none=True)
    B.run_model(compiled, x).backward()
def timed(n):
    out = []
    for _ in range(n):
        s, m, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        s.record(); model.zero_grad(set_to_none=True); loss = B.run_model(compiled, x); m.record(); loss.backward(); e.record()
        torch.cuda.synchronize()
        out.append((time.time(), s.elapsed_time(e), s.elapsed_time(m)))
    return out
for _ in range(3): step()
torch.cuda.synchronize()
rows = {}
time.sleep(3); rows["cold1"] = timed(8)
rows["long"] = timed(args.steps)
time.sleep(3); rows["cold2"] = timed(8)
time.sleep(0.5); rows["cold_short"] = timed(8)
for k, v in rows.items():
    ts = [t for _, t, _ in v]
    print(f"{args.model} {k}: n={len(v)} first5 {[round(t,2) for t in ts[:5]]} min {min(ts):.2f} median {statistics.median(ts):.2f}"
          + (f" median of last 50 {statistics.median(ts[-50:]):.2f}; blocks of 20: {[round(statistics.median(ts[i:i+20]),2) for i in range(0,len(ts),20)]}" if len(ts) > 50 else ""))
if args.json:
    json.dump(rows, open(args.json, "w"))
