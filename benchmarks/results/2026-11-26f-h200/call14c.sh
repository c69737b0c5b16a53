#!/usr/bin/env bash
# Fourteenth session, call C: HF Llama auto front (earliest-first, calls 40-42 measured), hand sets, all marked at the new default.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_front 590 $H --interleave 4 --mark none --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[all],offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[layers:2],inductor"
tail -1 $OUT/hf_front.err
python diag/summ12.py $OUT/hf_front.json | cut -c1-250
python - $OUT/hf_front.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    if "error" in r: print(r["variant"], r["error"]); continue
    print(f'{r["variant"][-34:]:34s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]:6.2f} uns {r["unsynced_step_ms"]:6.2f} vs_floor2 {r.get("vs_floor2") or 0:.3f} uns {r.get("unsynced_vs_floor2") or 0:.3f} R {r.get("R") or 0:.3f} peak {r["peak_mib"]:7.1f} off {r.get("offloaded_mib") or 0:5.0f} | {(r.get("selection") or "")[:150]}')
PY
