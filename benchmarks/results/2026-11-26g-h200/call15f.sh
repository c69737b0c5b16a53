#!/usr/bin/env bash
# Fifteenth session, call F: the phase-speed tolerance (3 %): decoder and HF Llama auto 1 % and 2 %.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench dec_auto 200 --interleave 3 --variants "inductor,$(A 0.01),$(A 0.02),inductor"
bench hf_auto 330 $H --interleave 3 --mark none --variants "inductor,$(A 0.01),$(A 0.02),inductor"
for f in dec_auto hf_auto; do tail -1 $OUT/$f.err; python diag/summ15.py $OUT/$f.json | cut -c1-200; done
