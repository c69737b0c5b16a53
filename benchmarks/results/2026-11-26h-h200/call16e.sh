#!/usr/bin/env bash
# Sixteenth session, call E: auto held to plain Inductor measured beside each plan: decoder front (auto 1-30 %, hand sets).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 560 --interleave 3 --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],inductor"
tail -1 $OUT/dec_front.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback" $OUT/dec_front.err | head -5
python benchmarks/results/2026-11-26h-h200/summ16.py $OUT/dec_front.json | cut -c1-200
