#!/usr/bin/env bash
# Fifteenth session, call A: GPU tests (the time outside the graph measured), decoder front with the step as run.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
( timeout 240 python -m pytest -q -k "cuda or device or temporary" tests/test_calibration.py tests/test_host_pool.py tests/test_runtime_ops.py tests/test_reliability.py tests/test_numerics.py > $OUT/pytest_gpu.txt 2>&1; echo "pytest exit $?" >> $OUT/pytest_gpu.txt )
tail -3 $OUT/pytest_gpu.txt
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 400 --interleave 5 --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:4],offload_pass[attn-but-last],offload_pass[layers:2],inductor"
tail -1 $OUT/dec_front.err
python diag/summ15.py $OUT/dec_front.json | cut -c1-200
