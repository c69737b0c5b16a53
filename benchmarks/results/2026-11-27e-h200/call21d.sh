#!/usr/bin/env bash
# Twenty-first session, call D: the decoder front with measured floors, timed paired (plain Inductor before and after every block, a second plain compile as the control), five rounds.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 390 --interleave 4 --paired --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],inductor"
tail -1 $OUT/dec_front.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback\|instead (graph\|room" $OUT/dec_front.err | cut -c1-300 | head -12
grep -h "^mode=auto" $OUT/dec_front.err | cut -c1-260
python diag/summ16.py $OUT/dec_front.json | cut -c1-200 > $OUT/summ16.txt
python diag/summ21.py $OUT/dec_front.json
grep -h "copies a plan of this graph ran before" $OUT/dec_front.err | cut -c1-300 | head -5
