#!/usr/bin/env bash
# Fourteenth session, call B: decoder auto front (earliest-first in the selection) + decoder all with headroom.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
R() { echo "offload_pass[all](reload_headroom=$1)"; }
bench dec_front 400 --interleave 5 --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[layers:2],inductor"
bench dec_head 170 --interleave 4 --variants "inductor,offload_pass[all],$(R 0.01),$(R 0.02),inductor"
python diag/summ12.py $OUT/dec_front.json | cut -c1-250
for f in dec_front dec_head; do tail -1 $OUT/$f.err; python - $OUT/$f.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    if "error" in r: print(r["variant"], r["error"]); continue
    print(f'{r["variant"][-34:]:34s} {r.get("wall_s",0):4.0f}s step {r["step_ms"]:6.2f} uns {r["unsynced_step_ms"]:6.2f} vs_floor2 {r.get("vs_floor2") or 0:.3f} uns {r.get("unsynced_vs_floor2") or 0:.3f} R {r.get("R") or 0:.3f} peak {r["peak_mib"]:7.1f} off {r.get("offloaded_mib") or 0:5.0f} | {(r.get("selection") or "")[:150]}')
PY
done
