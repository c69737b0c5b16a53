#!/usr/bin/env bash
# Twenty-second session, call C: the marks guarded by a key each, on torch 2.11: the marking and real-model tests, and the CUDA tests with marks (gradients against plain Inductor).
set -uo pipefail
export PYTHONPATH=$PWD
N=$(python -c "import xdist" 2>/dev/null && echo "-n 12" || echo "")
timeout 400 python -m pytest -q -p no:cacheprovider $N tests/test_markers.py tests/test_opt_out.py tests/test_mlp_roles.py tests/test_real_models.py tests/test_fused_roles.py > $OUT/mark_tests.txt 2>&1; echo "mark tests: exit $?"; tail -1 $OUT/mark_tests.txt
grep -h "^FAILED\|^E  " $OUT/mark_tests.txt | head -10
timeout 150 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_numerics.py tests/test_grouped_mlp.py tests/test_host_pool.py tests/test_runtime_ops.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "^FAILED\|^E  " $OUT/gpu_tests.txt | head -10
