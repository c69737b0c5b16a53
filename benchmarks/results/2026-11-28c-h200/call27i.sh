#!/usr/bin/env bash
# Twenty-seventh session, call I: each partition's own peak offset (Calibration.partition_offsets, offset_for) on
# HF Llama at budgets 0.4 and 0.6 (call G: 0.4's last plan predicted level 0.1's peak 3.3 % low under the offset
# offload alone measured).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
source benchmarks/bench_lib.sh
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_offsets 540 $H --mark none --variants "inductor,$(B 0.4),$(B 0.6)"
tail -1 $OUT/hf_offsets.err
grep -h "planned again\|Traceback\|out of reach by" $OUT/hf_offsets.err | cut -c1-300
gzip -f $OUT/*.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_offsets.json
python - $OUT/hf_offsets.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"][1:]:
    print(r["variant"][-20:], r.get("recompute_level"), r.get("calibrations"))
    for c in r.get("checks") or []:
        print("  ", c["graph"], c["replan_reason"], f'{c["predicted_peak_mib"]:.1f} / {c["measured_peak_mib"]:.1f} MiB', f'{c["step_error"]:+.3f}')
PY
