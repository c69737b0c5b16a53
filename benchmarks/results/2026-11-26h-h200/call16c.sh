#!/usr/bin/env bash
# Sixteenth session, call C: auto held to plain Inductor measured beside each plan: HF Llama auto 1/2/5 %; the calibration's GPU tests.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
( timeout 120 python -m pytest -q -k "cuda or device" tests/test_calibration.py > $OUT/pytest_cal.txt 2>&1; echo "pytest exit $?" >> $OUT/pytest_cal.txt ); tail -2 $OUT/pytest_cal.txt
bench hf_auto 440 $H --interleave 3 --mark none --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),inductor"
tail -1 $OUT/hf_auto.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback" $OUT/hf_auto.err | head -5
python benchmarks/results/2026-11-26h-h200/summ16.py $OUT/hf_auto.json | cut -c1-200
