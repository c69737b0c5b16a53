#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=$PWD CUBLAS_WORKSPACE_CONFIG=:4096:8
timeout 560 python diag/gradcheck14.py > $OUT/gradcheck.txt 2> $OUT/gradcheck.err; echo "gradcheck exit $?"
cat $OUT/gradcheck.txt; tail -3 $OUT/gradcheck.err

tail -3 $OUT/pytest_gpu.txt
