#!/usr/bin/env bash
# Sixteenth session, call B: decoder front (auto 1-30 %, hand sets) and the calibration's GPU tests.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 420 --interleave 4 --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[layers:2],inductor"
tail -1 $OUT/dec_front.err
python benchmarks/results/2026-11-26h-h200/summ16.py $OUT/dec_front.json | cut -c1-200
( timeout 150 python -m pytest -q -k "cuda or device" tests/test_calibration.py > $OUT/pytest_cal.txt 2>&1; echo "pytest exit $?" >> $OUT/pytest_cal.txt ); tail -2 $OUT/pytest_cal.txt
