#!/usr/bin/env bash
# Thirteenth session, call C/D: item 3 on HF Llama, interleaved: budgets $1 and $2, both planners.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
bench budgets_hf_$1 590 $H --interleave 4 --mark none --variants "inductor,recompute($1),$(B $1),recompute($2),$(B $2)"
tail -2 $OUT/budgets_hf_$1.err
python - <<PY
import json, os
d = json.load(open(os.environ["OUT"] + "/budgets_hf_$1.json"))
rows = d["results"]; b = rows[0]
for r in rows:
    if "error" in r: print(r["variant"], r["error"]); continue
    print(f'{r["variant"][:52]:52s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]/b["step_ms"]:.3f}x uns {r["unsynced_step_ms"]/b["unsynced_step_ms"]:.3f}x (alone {r.get("step_ms_alone", r["step_ms"])/b.get("step_ms_alone", b["step_ms"]):.3f}x) peak {r["peak_mib"]/b["peak_mib"]:.3f} ({r["peak_mib"]:.0f} MiB) off {r.get("offloaded_mib") or 0:.0f} rec {r.get("recomputed_mib") or 0:.0f} pred err {r.get("predicted_step_error")} peak err {r.get("predicted_peak_error")}')
PY
