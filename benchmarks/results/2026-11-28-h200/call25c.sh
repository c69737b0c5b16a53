#!/usr/bin/env bash
# Twenty-fifth session, call C, after ReplanReason.PEAK (a re-plan whose own peak is off by more than 3 % is planned
# once more): the decoder's mode="budget" at 0.4 and 0.2 again (call A: 0.2's last plan -6.4 % on its peak), and
# item 3 on HF Llama on the final code, our planner at 0.8, 0.6, 0.4 (PyTorch's recompute in another process: a
# process holding both segfaulted in the thirteenth session).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
source benchmarks/bench_lib.sh
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
bench budgets_decoder_low 170 --mark none --variants "inductor,$(B 0.4),$(B 0.2)"
tail -1 $OUT/budgets_decoder_low.err
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench budgets_hf 380 $H --mark none --variants "inductor,$(B 0.8),$(B 0.6),$(B 0.4)"
tail -1 $OUT/budgets_hf.err
grep -h "planned again\|not planned again\|Traceback" $OUT/budgets_decoder_low.err $OUT/budgets_hf.err | cut -c1-220
gzip -f $OUT/*.err
python - $OUT/budgets_decoder_low.json $OUT/budgets_hf.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e); continue
    print(f, d.get("device"))
    ref = d["results"][0]
    print("| variant | step ms | slowdown | peak MiB | peak / Inductor | offloaded | recomputed | re-plans | predicted step | predicted peak |")
    for r in d["results"]:
        reasons = [c.get("replan_reason") for c in r.get("checks") or []]
        g = lambda k, fmt="{:.3f}": (fmt.format(r[k]) if isinstance(r.get(k), (int, float)) else "-")
        print(f'| {r["variant"][-32:]} | {g("step_ms", "{:.2f}")} | {g("slowdown")} | {g("peak_mib", "{:.1f}")} | '
              f'{r["peak_mib"] / ref["peak_mib"]:.3f} | {g("offloaded_mib", "{:.0f}")} | {g("recomputed_mib", "{:.0f}")} | {reasons} | '
              f'{g("predicted_step_error", "{:+.3f}")} | {g("predicted_peak_error", "{:+.3f}")} |' + (" ERROR " + str(r["error"])[:200] if "error" in r else ""))
PY
