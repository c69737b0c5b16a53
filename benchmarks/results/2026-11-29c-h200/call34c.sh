#!/usr/bin/env bash
# Thirty-fourth session, call C: item 4 on the final code (the twenty-third session's command: HF Llama, attention and
# MLP marked, paired, four rounds; then 1.112 x the two-way floor synchronized, 1.088 x back to back, R 0.997).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_all 420 $H --mark all --interleave 4 --paired --log info --variants "inductor,offload_pass,inductor"
grep -h "planned again\|instead (graph\|Traceback" $OUT/hf_all.err | cut -c1-260 | tail -8
gzip -f $OUT/hf_all.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_all.json
python -c "
import json
d = json.load(open('$OUT/hf_all.json'))
print('bandwidth', d.get('bandwidth_gbps'))
for r in d['results']:
    g = r.get
    print(r['variant'], '| step', g('step_ms'), '| b2b', g('unsynced_step_ms'), '| floor2', g('floor2_ms'), '| vs floor2', g('vs_floor2'), '| b2b vs floor2', g('unsynced_vs_floor2'), '| R', g('R'), '| R boundary', g('R_boundary'), '| as run err', g('as_run_error'), '| pred err', g('predicted_step_error'), '| peak', g('peak_mib'), '| offloaded', g('offloaded_mib'), '| paired', g('paired_slowdown'), g('paired_unsynced_slowdown'))
"
