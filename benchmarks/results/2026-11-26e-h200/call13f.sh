#!/usr/bin/env bash
# Thirteenth session, call F: HF Llama budget 0.2 (both planners), and ours at 0.6 beside plain Inductor only.
set -uo pipefail
export PYTHONPATH=$PWD
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
run() {  # name limit variants
  DUMP=60 OUT=$OUT/s$1 timeout $2 python diag/logged_bench.py $H --interleave 4 --mark none --variants "$3" --json $OUT/hf_$1.json > $OUT/hf_$1.log 2> $OUT/hf_$1.err
  echo "$1 exit $?"; grep -E "^\[.*(mode=budget|planned again|out of reach)" $OUT/hf_$1.log | cut -c1-200 | tail -4
}
run b02 300 "inductor,recompute(0.2),offload_pass[none](mode=budget;memory_budget=0.2)"
run b06 250 "inductor,offload_pass[none](mode=budget;memory_budget=0.6)"
python - <<'PY'
import json, os
for n in ("b02", "b06"):
    p = os.environ["OUT"] + f"/hf_{n}.json"
    if not os.path.exists(p): print(n, "no json"); continue
    rows = json.load(open(p))["results"]; base = rows[0]
    for r in rows:
        if "error" in r: print(r["variant"], r["error"]); continue
        print(f'{r["variant"][:50]:50s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]/base["step_ms"]:.3f}x uns {r["unsynced_step_ms"]/base["unsynced_step_ms"]:.3f}x peak {r["peak_mib"]/base["peak_mib"]:.3f} ({r["peak_mib"]:.0f} MiB) off {r.get("offloaded_mib") or 0:.0f} rec {r.get("recomputed_mib") or 0:.0f} pred err {r.get("predicted_step_error")} peak err {r.get("predicted_peak_error")}')
PY
