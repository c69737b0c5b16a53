#!/usr/bin/env bash
# Twenty-fifth session, call A, on the final code (reloads compiled aligned, 6396137 on): item 4 (HF Llama, attention
# and MLP marked, paired against plain Inductor) and item 3 on the in-house decoder (both planners' budgets 0.8-0.2 in
# one process, as benchmarks/run_budgets.sh runs them).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
python -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
source benchmarks/bench_lib.sh
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_all 270 $H --mark all --interleave 4 --paired --variants "inductor,offload_pass,inductor"
tail -1 $OUT/hf_all.err
variants="inductor"
for b in 0.8 0.6 0.4 0.2; do variants="$variants,recompute($b),offload_pass[none](mode=budget;memory_budget=$b)"; done
bench budgets_decoder 300 --mark none --variants "$variants"
tail -1 $OUT/budgets_decoder.err
grep -h "Traceback\|out of reach\|could not" $OUT/budgets_decoder.err | cut -c1-300 | head -8
gzip -f $OUT/*.err
python - $OUT/hf_all.json $OUT/budgets_decoder.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e); continue
    print(f, d.get("device"), "bandwidth", d.get("bandwidth_gbps"))
    ks = ("step_ms", "unsynced_step_ms", "vs_floor2", "unsynced_vs_floor2", "paired_slowdown", "paired_unsynced_slowdown", "R", "peak_mib", "offloaded_mib", "slowdown", "predicted_step_error", "predicted_peak_error")
    print("| variant | " + " | ".join(ks) + " |")
    for r in d["results"]:
        g = lambda k: (f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k, "-")))
        print("| " + " | ".join([r["variant"][-44:]] + [g(k) for k in ks]) + " |" + (" ERROR " + str(r["error"])[:200] if "error" in r else ""))
PY
