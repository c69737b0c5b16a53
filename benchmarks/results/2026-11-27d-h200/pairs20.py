"""Twentieth session: does measuring plain Inductor in turns with a plan (call by call) read the plan's
slowdown as the plan and plain Inductor each run alone (steady) would? Decoder; plain, attn-but-last, attn."""
import argparse, json, os, statistics, subprocess, sys, time
sys.path.insert(0, "benchmarks")
import torch
import bench_offload as b

p = argparse.ArgumentParser(); b.add_model_args(p); args = p.parse_args([])
args.mark = "none"; args.min_bytes = 1 << 20; args.warmup = 45; args.steps = 10; args.profile = False; args.trace_dir = None
x = b.model_inputs(args, torch.bfloat16)
kept = []
names = ["inductor", "offload_pass[attn-but-last]", "offload_pass[attn]"]
for n in names:
    t0 = time.time(); b.run_variant(n, args, x, kept); print(f"{n} compiled+warm {time.time()-t0:.0f}s", flush=True)
steps = {n: k[1] for n, k in zip(names, kept)}
out = os.environ.get("OUT", "/tmp")
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader", "-lms", "50"],
                       stdout=open(f"{out}/smi20.csv", "w"))
marks = []
def run(seq):
    """seq: list of names; returns per-name list of (index, ms)."""
    t = {}
    for i, n in enumerate(seq):
        ms = steps[n]()[0]
        t.setdefault(n, []).append((i, ms))
    return t
med = lambda xs: statistics.median(xs)
rows = []
def record(label, plan, ratio, pm, qm):
    rows.append((label, plan, ratio, pm, qm)); print(f"{label:28s} {plan:30s} plain {pm:6.2f} plan {qm:6.2f} ratio {ratio:+.4f}", flush=True)
for rep in range(2):
  for q in names[1:]:
    P = "inductor"
    marks.append((time.time(), f"steady {q}"))
    a = run([P] * 40); bq = run([q] * 40); c = run([P] * 40)
    pm = med([m for _, m in a[P][20:]] + [m for _, m in c[P][20:]]); qm = med([m for _, m in bq[q][20:]])
    record(f"steady40 r{rep}", q, qm / pm - 1, pm, qm)
    marks.append((time.time(), f"abba {q}"))
    t = run([P, q, q, P] * 10)
    pm = med([m for _, m in t[P]]); qm = med([m for _, m in t[q]]); record(f"turns ABBA r{rep}", q, qm / pm - 1, pm, qm)
    for k in (4, 10):
        marks.append((time.time(), f"blocks{k} {q}"))
        t = run(([P] * k + [q] * k) * max(2, 40 // k))
        # the last half of each block
        pm = med([m for i, m in t[P] if (i % (2 * k)) >= k // 2]); qm = med([m for i, m in t[q] if (i % (2 * k)) >= k + k // 2])
        record(f"blocks{k} last-half r{rep}", q, qm / pm - 1, pm, qm)
    # what the benchmark does: rounds of 10 synced steps per variant
    marks.append((time.time(), f"bench-like {q}"))
    t = run(([P] * 10 + [q] * 10) * 4)
    pm = med([m for _, m in t[P]]); qm = med([m for _, m in t[q]]); record(f"bench-like10 r{rep}", q, qm / pm - 1, pm, qm)
smi.terminate()
json.dump({"rows": rows, "marks": marks}, open(f"{out}/pairs20.json", "w"), indent=1)
print("| pattern | plan | plain ms | plan ms | slowdown |")
for label, plan, ratio, pm, qm in rows:
    print(f"| {label} | {plan} | {pm:.2f} | {qm:.2f} | {ratio*100:+.1f} % |")
