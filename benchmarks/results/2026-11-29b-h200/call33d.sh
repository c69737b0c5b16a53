#!/usr/bin/env bash
# Thirty-third session, call D: the in-house decoder (bench_offload.py's default, 6 x 2048, seq 4096, b2, bf16) after the
# selection's reloads were placed as the rewrite places them: mode="auto" at 2 % (item 2; the twenty-second session:
# 424 MiB at +0.5 % paired), mode="budget" at 0.8 (item 3's tie with PyTorch's recompute(0.8)) and 0.2 (the
# twenty-seventh: offload alone, out of reach, 0.297 at 3.76 x), paired.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_check 540 --interleave 2 --paired --mark none --log info --variants "inductor,$(A 0.02),recompute(0.8),$(B 0.8),$(B 0.2)"
grep -h "^\[[0-9]* s\]\|mode=budget: offload plus\|out of reach\|Traceback" $OUT/dec_check.err | cut -c1-300 | tail -16
gzip -f $OUT/dec_check.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/dec_check.json
python -c "
import json
rs = json.load(open('$OUT/dec_check.json'))['results']
for r in rs:
    g=lambda k: r.get(k)
    print(r['variant'][-45:], '| paired', g('paired_slowdown'), '| paired b2b', g('paired_unsynced_slowdown'), '| freed', round(rs[0]['peak_mib'] - (g('peak_mib') or 0),1), '| peak', round(g('peak_mib') or 0,1))
"
