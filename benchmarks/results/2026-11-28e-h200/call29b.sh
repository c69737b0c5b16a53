#!/usr/bin/env bash
# Twenty-ninth session, call B: the CUDA tests after the layout fix (the new two-convolution test on the GPU
# with Inductor's layout optimization forced on), on torch 2.11.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
timeout 420 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_reliability.py tests/test_runtime_ops.py tests/test_random_views.py tests/test_numerics.py tests/test_host_pool.py tests/test_grouped_mlp.py tests/test_exotic_saves.py tests/test_subclass.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "FAILED\|Error" $OUT/gpu_tests.txt | head -20
