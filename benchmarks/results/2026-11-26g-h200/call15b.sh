#!/usr/bin/env bash
# Fifteenth session, call B: HF Llama front (auto, hand sets, all marked) with the step as run.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_front 560 $H --interleave 4 --mark none --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[all],offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[layers:2],inductor"
tail -1 $OUT/hf_front.err
python diag/summ15.py $OUT/hf_front.json | cut -c1-200
