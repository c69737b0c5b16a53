#!/usr/bin/env bash
# Sixteenth session, call A: HF Llama auto front (1-30 %) on the stall fit that keeps the earlier bandwidth.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_auto 560 $H --interleave 3 --mark none --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),inductor"
tail -1 $OUT/hf_auto.err
python benchmarks/results/2026-11-26h-h200/summ16.py $OUT/hf_auto.json | cut -c1-200
