#!/usr/bin/env bash
# Eighteenth session, call A: the CUDA calibration tests (measurement in turns, fall-back), the noise of the new
# measurement (diag18.py).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
timeout 240 python -m pytest -q -k "cuda or device" tests/test_calibration.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"
tail -3 $OUT/gpu_tests.txt
timeout 200 python diag/diag18.py > $OUT/diag18.txt 2> $OUT/diag18.err; echo "diag18: exit $?"
grep -v "^  call" $OUT/diag18.txt | cut -c1-400





