#!/usr/bin/env bash
# Thirteenth session, call B: HF Llama auto sweep, hand sets and attention+MLP marked, interleaved.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_front 590 $H --interleave 5 --mark none --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[all],offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[layers:2],inductor"
tail -2 $OUT/hf_front.err
python diag/summ12.py $OUT/hf_front.json | cut -c1-260
python - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/hf_front.json"))
for r in d["results"]:
    if "error" in r: print(r["variant"], r["error"]); continue
    print(f'{r["variant"][:46]:46s} vs_floor2 {r.get("vs_floor2")} R {r.get("R")} R_boundary {r.get("R_boundary")} off {r.get("offloaded_mib")} uns_slow {r.get("unsynced_slowdown")}')
PY
