#!/usr/bin/env bash
# Twenty-third session, call A: HEAD (8eacd4f) on torch 2.11 + CUDA: the CUDA tests over calibration (re-plans, turns, fallbacks), host pool, runtime ops, reliability, numerics, grouped MLP, kernel timing, random views; the marking and real-model tests.
set -uo pipefail
export PYTHONPATH=$PWD
git log --oneline -1 2>/dev/null
python -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
N=$(python -c "import xdist" 2>/dev/null && echo "-n 12" || echo "")
timeout 280 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_calibration.py tests/test_host_pool.py tests/test_runtime_ops.py tests/test_reliability.py tests/test_numerics.py tests/test_grouped_mlp.py tests/test_kernel_timing.py tests/test_random_views.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "^FAILED\|^E  " $OUT/gpu_tests.txt | head -10
timeout 280 python -m pytest -q -p no:cacheprovider $N tests/test_markers.py tests/test_opt_out.py tests/test_mlp_roles.py tests/test_real_models.py tests/test_fused_roles.py > $OUT/mark_tests.txt 2>&1; echo "mark tests: exit $?"; tail -1 $OUT/mark_tests.txt
grep -h "^FAILED\|^E  " $OUT/mark_tests.txt | head -10
