#!/usr/bin/env bash
# Twenty-seventh session, call K: recompute.search_goes_on (the search over recompute levels goes on past the first
# level within the budget while the predicted step falls) on the decoder's mode="budget" at 0.8, 0.6 and 0.4 (call J:
# 0.4 kept level 0.9 with 15 copies, 1.62 x), PyTorch's recompute at 0.8 in the same process.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
bench decoder_search 420 --mark none --variants "inductor,recompute(0.8),$(B 0.8),$(B 0.6),$(B 0.4)"
tail -1 $OUT/decoder_search.err
grep -h "planned again\|Traceback\|out of reach by" $OUT/decoder_search.err | cut -c1-200
grep -h "predicted per activation_memory_budget" $OUT/decoder_search.err | sed 's/.*predicted per/per/' | cut -c1-400
gzip -f $OUT/*.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/decoder_search.json
python - $OUT/decoder_search.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"][2:]:
    print(r["variant"][-20:], r.get("recompute_level"))
    for c in r.get("checks") or []:
        print("  ", c["graph"], c["replan_reason"], f'{c["predicted_peak_mib"]:.1f} / {c["measured_peak_mib"]:.1f} MiB', f'{c["step_error"]:+.3f}')
PY
