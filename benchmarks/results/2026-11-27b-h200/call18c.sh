#!/usr/bin/env bash
# Eighteenth session, call C: HF Llama, auto 2 % and 10 % against attn:4, two rounds.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
timeout 120 python -m pytest -q -k "cuda or device" tests/test_calibration.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_final 500 $H --interleave 2 --mark none --variants "inductor,$(A 0.02),$(A 0.1),offload_pass[attn:4],inductor"
tail -1 $OUT/hf_final.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback\|instead (graph" $OUT/hf_final.err | cut -c1-300 | head -8
python diag/summ16.py $OUT/hf_final.json | cut -c1-200
