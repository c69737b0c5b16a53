#!/usr/bin/env bash
# Twenty-fourth session, call D, on torch 2.11 after the reload-alignment lowering (6396137): the CUDA tests over
# calibration, host pool, runtime ops, reliability, numerics, grouped MLP, kernel timing, random views, dropout,
# reload alignment; the marking and real-model tests; the HF sweep (sweep24.py) on CUDA in deterministic mode.
set -uo pipefail
export PYTHONPATH=$PWD
git log --oneline -1 2>/dev/null
python -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
timeout 270 python -m pytest -q -p no:cacheprovider -k "cuda or device or temporary" tests/test_calibration.py tests/test_host_pool.py tests/test_runtime_ops.py tests/test_reliability.py tests/test_numerics.py tests/test_grouped_mlp.py tests/test_kernel_timing.py tests/test_random_views.py tests/test_dropout.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests: exit $?"; tail -1 $OUT/gpu_tests.txt
grep -h "^FAILED\|^E  " $OUT/gpu_tests.txt | head -10
for group in "mistral qwen2" "gemma gemma2" "phi3 mixtral" "opt bert bert_dropout" "t5" "falcon gptneox"; do
  ( DET=1 DEVICE=cuda timeout 270 python benchmarks/results/2026-11-27h/sweep24.py $group > "$OUT/sweep_cuda_${group// /_}.txt" 2>&1 ) &
done
timeout 270 python -m pytest -q -p no:cacheprovider -n 8 tests/test_markers.py tests/test_opt_out.py tests/test_mlp_roles.py tests/test_real_models.py tests/test_fused_roles.py tests/test_reload_alignment.py tests/test_kernel_order.py > $OUT/mark_tests.txt 2>&1; echo "mark tests: exit $?"; tail -1 $OUT/mark_tests.txt
grep -h "^FAILED\|^E  " $OUT/mark_tests.txt | head -10
wait
grep -hE "^[a-z_0-9]+: (graphs|ERROR)|^    s[0-9]|^    loss" $OUT/sweep_cuda_*.txt
