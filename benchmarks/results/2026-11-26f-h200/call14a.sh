#!/usr/bin/env bash
# Fourteenth session, call A: HF all marked with reload_headroom as a share; decoder all; clock drift.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
R() { echo "offload_pass[all](reload_headroom=$1)"; }
timeout 120 python diag/clock_drift.py > $OUT/clock.txt 2>$OUT/clock.err; echo "clock exit $?"
bench hf_head 420 $H --interleave 4 --variants "inductor,offload_pass[all],$(R 0.01),$(R 0.015),$(R 0.02),$(R 0.03),inductor"

cat $OUT/clock.txt
for f in hf_head; do tail -1 $OUT/$f.err; python - $OUT/$f.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    if "error" in r: print(r["variant"], r["error"]); continue
    print(f'{r["variant"][-34:]:34s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]:6.2f} uns {r["unsynced_step_ms"]:6.2f} fwd {r["forward_ms"]:6.2f} vs_floor2 {r.get("vs_floor2") or 0:.3f} uns {r.get("unsynced_vs_floor2") or 0:.3f} R {r.get("R") or 0:.3f} peak {r["peak_mib"]:7.1f} off {r.get("offloaded_mib") or 0:5.0f}')
PY
done
