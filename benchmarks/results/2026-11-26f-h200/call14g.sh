#!/usr/bin/env bash
# Fourteenth session, call G: HF Llama mode=budget at 0.78 and 0.7 beside plain Inductor (item 3: a point at PyTorch 0.6's peak).
# diag/logged_bench.py is the one archived in ../2026-11-26e-h200/.
set -uo pipefail
export PYTHONPATH=$PWD
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
DUMP=500 OUT=$OUT/sg timeout 560 python diag/logged_bench.py $H --interleave 4 --mark none --variants "inductor,offload_pass[none](mode=budget;memory_budget=0.78),offload_pass[none](mode=budget;memory_budget=0.7),inductor" --json $OUT/hf_b078.json > $OUT/hf_b078.log 2> $OUT/hf_b078.err
echo "exit $?"; grep -E "^\[.*(mode=budget|planned again|out of reach)" $OUT/hf_b078.log | cut -c1-220 | tail -6
python - <<'PY'
import json, os
p = os.environ["OUT"] + "/hf_b078.json"
rows = json.load(open(p))["results"]; base = rows[0]
for r in rows:
    if "error" in r: print(r["variant"], r["error"]); continue
    print(f'{r["variant"][:50]:50s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]/base["step_ms"]:.3f}x uns {r["unsynced_step_ms"]/base["unsynced_step_ms"]:.3f}x peak {r["peak_mib"]/base["peak_mib"]:.3f} ({r["peak_mib"]:.0f} MiB) off {r.get("offloaded_mib") or 0:.0f} rec {r.get("recomputed_mib") or 0:.0f} pred err {r.get("predicted_step_error")} peak err {r.get("predicted_peak_error")}')
PY
