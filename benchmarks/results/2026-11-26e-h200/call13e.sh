#!/usr/bin/env bash
# Thirteenth session, calls E/F: item 3 on HF Llama, one process per budget: plain Inductor,
# PyTorch's recompute and ours at that budget, interleaved.
set -uo pipefail
export PYTHONPATH=$PWD
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
for b in "$@"; do
  DUMP=60 OUT=$OUT/s$b timeout 290 python diag/logged_bench.py $H --interleave 4 --mark none \
    --variants "inductor,recompute($b),offload_pass[none](mode=budget;memory_budget=$b)" --json $OUT/hf_budget_$b.json > $OUT/hf_budget_$b.log 2> $OUT/hf_budget_$b.err
  echo "budget $b exit $?"
  grep -E "^\[.*(mode=budget|planned again|measured on)" $OUT/hf_budget_$b.log | cut -c1-200 | tail -6
done
python - "$@" <<'PY'
import json, os, sys
for b in sys.argv[1:]:
    p = os.environ["OUT"] + f"/hf_budget_{b}.json"
    if not os.path.exists(p): print(b, "no json"); continue
    rows = json.load(open(p))["results"]; base = rows[0]
    for r in rows:
        if "error" in r: print(r["variant"], r["error"]); continue
        print(f'{r["variant"][:50]:50s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]/base["step_ms"]:.3f}x uns {r["unsynced_step_ms"]/base["unsynced_step_ms"]:.3f}x peak {r["peak_mib"]/base["peak_mib"]:.3f} ({r["peak_mib"]:.0f} MiB) off {r.get("offloaded_mib") or 0:.0f} rec {r.get("recomputed_mib") or 0:.0f} pred err {r.get("predicted_step_error")} peak err {r.get("predicted_peak_error")}')
PY
