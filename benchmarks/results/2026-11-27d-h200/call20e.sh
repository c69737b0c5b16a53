#!/usr/bin/env bash
# Twentieth session, call E: the decoder front with room re-plans with plain Inductor measured in blocks (auto 1-30 % against the hand sets), three rounds.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 390 --interleave 3 --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],inductor"
tail -1 $OUT/dec_front.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback\|instead (graph" $OUT/dec_front.err | cut -c1-300 | head -8
grep -h "^mode=auto" $OUT/dec_front.err | cut -c1-260
python diag/summ16.py $OUT/dec_front.json | cut -c1-200
