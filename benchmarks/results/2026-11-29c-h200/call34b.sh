#!/usr/bin/env bash
# Thirty-fourth session, call B: item 2's decoder front on the final code (the last full front: the twenty-second
# session, before the selection's reload placement changed in the thirty-third), paired, four rounds; item 1's
# predicted against measured from the same run.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 575 --interleave 4 --paired --mark none --log info --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],inductor"
grep -h "planned again\|instead (graph\|could not be planned\|Traceback" $OUT/dec_front.err | cut -c1-260 | tail -14
gzip -f $OUT/dec_front.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/dec_front.json
python benchmarks/results/2026-11-27e-h200/summ21.py $OUT/dec_front.json | head -11
