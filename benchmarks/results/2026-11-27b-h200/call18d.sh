#!/usr/bin/env bash
# Eighteenth session, call D: the live measurement's noise (diag18d.py, six runs), then the decoder front once more.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
timeout 170 python diag/diag18d.py > $OUT/diag18d.txt 2> $OUT/diag18d.err; echo "diag18d: exit $?"
cut -c1-200 $OUT/diag18d.txt
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 380 --interleave 3 --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],inductor"
tail -1 $OUT/dec_front.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback\|instead (graph" $OUT/dec_front.err | cut -c1-300 | head -8
python diag/summ16.py $OUT/dec_front.json | cut -c1-200
