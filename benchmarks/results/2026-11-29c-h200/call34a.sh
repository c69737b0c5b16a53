#!/usr/bin/env bash
# Thirty-fourth session, call A: item 2's HF Llama front on the final code (the last full front: the twenty-second
# session, before the selection's reload placement changed in the thirty-third), paired, three rounds; item 1's
# predicted against measured from the same run.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_front 575 $H --interleave 3 --paired --mark none --log info --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:2],offload_pass[attn:4],inductor"
grep -h "planned again\|instead (graph\|could not be planned\|Traceback" $OUT/hf_front.err | cut -c1-260 | tail -14
gzip -f $OUT/hf_front.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_front.json
python benchmarks/results/2026-11-27e-h200/summ21.py $OUT/hf_front.json | head -11
