#!/usr/bin/env bash
# Thirteenth session, call G: HF Llama budget 0.2, one process, variants one after another (no --interleave),
# then interleaved again with faulthandler on (where the segmentation fault is).
set -uo pipefail
export PYTHONPATH=$PWD
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
V="inductor,recompute(0.2),offload_pass[none](mode=budget;memory_budget=0.2)"
OUT=$OUT/sa timeout 290 python diag/logged_bench.py $H --mark none --variants "$V" --json $OUT/hf_b02_alone.json > $OUT/hf_b02_alone.log 2> $OUT/hf_b02_alone.err
echo "alone exit $?"; grep -E "^\[.*(mode=budget|out of reach)" $OUT/hf_b02_alone.log | cut -c1-200 | tail -3
OUT=$OUT/si timeout 280 python diag/logged_bench.py $H --interleave 4 --mark none --variants "$V" --json $OUT/hf_b02_inter.json > $OUT/hf_b02_inter.log 2> $OUT/hf_b02_inter.err
echo "interleaved exit $?"; grep -B2 -A25 "Fatal Python error" $OUT/hf_b02_inter.err | grep -v threading | cut -c1-170 | head -40
python - <<'PY'
import json, os
for n in ("b02_alone", "b02_inter"):
    p = os.environ["OUT"] + f"/hf_{n}.json"
    if not os.path.exists(p): print(n, "no json"); continue
    rows = json.load(open(p))["results"]; base = rows[0]
    for r in rows:
        if "error" in r: print(r["variant"], r["error"]); continue
        print(f'{n} {r["variant"][:50]:50s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]/base["step_ms"]:.3f}x uns {r["unsynced_step_ms"]/base["unsynced_step_ms"]:.3f}x peak {r["peak_mib"]/base["peak_mib"]:.3f} ({r["peak_mib"]:.0f} MiB) off {r.get("offloaded_mib") or 0:.0f} rec {r.get("recomputed_mib") or 0:.0f} pred err {r.get("predicted_step_error")} peak err {r.get("predicted_peak_error")}')
PY
