#!/usr/bin/env bash
# Twenty-third session, call B: item 4 (HF Llama, attention and MLP marked) under the default reload headroom (2 %) and 2.5 / 3 %, paired: what the synchronized step's 1.10 x costs in R on HEAD.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_headroom 420 $H --mark all --interleave 4 --paired --variants "inductor,offload_pass,offload_pass(reload_headroom=0.025),offload_pass(reload_headroom=0.03),inductor"
tail -2 $OUT/hf_headroom.err
python - $OUT/hf_headroom.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| variant | step | unsync | vs floor2 | unsync vs floor2 | paired | paired unsync | R | peak | offloaded |")
for r in d["results"]:
    g = lambda k: (f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k, "-")))
    print("| " + " | ".join([r["variant"]] + [g(k) for k in ("step_ms", "unsynced_step_ms", "vs_floor2", "unsynced_vs_floor2", "paired_slowdown", "paired_unsynced_slowdown", "R", "peak_mib", "offloaded_mib")]) + " |")
print("floor2", d["results"][1].get("floor2_ms"), "bandwidth", d["bandwidth_gbps"])
PY
