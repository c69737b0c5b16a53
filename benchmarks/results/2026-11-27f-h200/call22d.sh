#!/usr/bin/env bash
# Twenty-second session, call D: the HF Llama front again on the final code (measured floors), timed paired, three rounds: a second run of item 2.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_front 570 $H --interleave 3 --paired --mark none --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:2],offload_pass[attn:4],inductor"
tail -1 $OUT/hf_front.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback\|instead (graph\|room" $OUT/hf_front.err | cut -c1-300 | head -12
grep -h "^mode=auto" $OUT/hf_front.err | cut -c1-260
python diag/summ16.py $OUT/hf_front.json | cut -c1-200 > $OUT/summ16.txt
python diag/summ21.py $OUT/hf_front.json
