#!/usr/bin/env bash
# Twenty-seventh session, call J, on 20d703f (each partition's own peak offset): item 1 on HF Qwen3-MoE with every
# role marked (the twenty-sixth session: its plan's own calls -6.6 % on the step, a host-bound forward), and the
# decoder's mode="budget" at 0.6 and 0.4 (the twenty-fifth session: 0.4's last plan -1.9 % on its peak).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
source benchmarks/bench_lib.sh
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
Q="--model hf_qwen3_moe --layers 4 --hidden 2048 --heads 16 --ffn 768 --experts 16 --batch 1"
bench qwen_marked 200 $Q --mark roles=all --variants "inductor,offload_pass"
bench decoder_budgets 300 --mark none --variants "inductor,$(B 0.6),$(B 0.4)"
for n in qwen_marked decoder_budgets; do
  tail -1 $OUT/$n.err
  grep -h "planned again\|Traceback\|out of reach by" $OUT/$n.err | cut -c1-300
done
gzip -f $OUT/*.err
for n in qwen_marked decoder_budgets; do
  python benchmarks/results/2026-11-28b-h200/table.py $OUT/$n.json
  python - $OUT/$n.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"][1:]:
    print(r["variant"][-20:], r.get("recompute_level"), [c[-120:] for c in r.get("calibrations") or []])
    for c in r.get("checks") or []:
        print("  ", c["graph"], c["replan_reason"], f'{c["predicted_peak_mib"]:.1f} / {c["measured_peak_mib"]:.1f} MiB', f'{c["step_error"]:+.3f}')
PY
done
