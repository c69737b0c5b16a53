#!/usr/bin/env bash
# Thirty-third session, call C: HF Llama (8 x 2048, ffn 5632, seq 4096, bf16) after the selection's reloads were placed
# as the rewrite places them: mode="auto" at 2, 10 and 30 % (item 2 again; the twenty-second session: 440, 592, 884 MiB
# freed at +1.5, +8.3, +24.8 % paired) and mode="budget" at 0.4 (the twenty-seventh: 0.540 at 2.30 x), paired.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_check 570 $H --interleave 2 --paired --mark none --log info --variants "inductor,$(A 0.02),$(A 0.1),$(A 0.3),$(B 0.4)"
grep -h "^\[[0-9]* s\]\|mode=budget: offload plus\|out of reach\|planned again\|Traceback" $OUT/hf_check.err | cut -c1-300 | tail -24
gzip -f $OUT/hf_check.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_check.json
python -c "
import json
for r in json.load(open('$OUT/hf_check.json'))['results']:
    g=lambda k: r.get(k)
    print(r['variant'][-45:], '| paired', g('paired_slowdown'), '| paired b2b', g('paired_unsynced_slowdown'), '| freed', round(5e-324+(json.load(open('$OUT/hf_check.json'))['results'][0]['peak_mib'] - (g('peak_mib') or 0)),1), '| peak', round(g('peak_mib') or 0,1))
"
