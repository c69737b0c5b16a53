#!/usr/bin/env bash
# (diag/sweep.py and diag/codediff.py as they were then: sweep24.py and codediff24.py here, whose docstring says how they differed)
# Twenty-fourth session, call B (call A again with Inductor's deterministic mode: reductions not configured by timing), on torch 2.11: tests/test_dropout.py (CPU and CUDA, Inductor deterministic mode), and
# diag/sweep.py (a copy: sweep24.py here): eleven HF architectures from tiny configs, attention and MLP marked,
# offload_pass against plain Inductor, fp32, deterministic algorithms, torch.equal on loss and every gradient, on CUDA.
set -uo pipefail
export PYTHONPATH=$PWD
git log --oneline -1 2>/dev/null
python -c "import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
( timeout 400 python -m pytest -q -p no:cacheprovider tests/test_dropout.py > $OUT/dropout_tests.txt 2>&1; echo "dropout tests: exit $?" >> $OUT/dropout_tests.txt ) &
for group in "mistral qwen2" "gemma gemma2" "phi3 mixtral" "opt bert bert_dropout" "t5" "falcon gptneox"; do
  ( DET=1 DEVICE=cuda timeout 500 python diag/sweep.py $group > "$OUT/sweep_cuda_${group// /_}.txt" 2>&1 ) &
done
wait
cat $OUT/dropout_tests.txt | tail -3
grep -h "^FAILED\|^E  " $OUT/dropout_tests.txt | head -10
grep -hE "^[a-z_0-9]+: (graphs|ERROR)|^    s[0-9]|^    loss" $OUT/sweep_cuda_*.txt
# plain Inductor against itself, same settings: what the comparison can tell apart
SELF=1 DET=1 DEVICE=cuda timeout 300 python diag/sweep.py opt bert_dropout > $OUT/sweep_cuda_self.txt 2>&1
grep -hE "^[a-z_0-9]+: (graphs|ERROR)|^    s[0-9]|^    loss" $OUT/sweep_cuda_self.txt
