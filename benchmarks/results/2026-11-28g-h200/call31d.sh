#!/usr/bin/env bash
# Thirty-first session, call D (the device time left): timm ResNet-50 (bf16, batch 128) against PyTorch's own
# recompute-only budget (activation_memory_budget 0.8, 0.6, 0.4) and our mode="budget" at 0.4, same process.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench resnet50_recompute 400 --model timm:resnet50 --batch 128 --mark none --log info \
  --variants "inductor,recompute(0.8),recompute(0.6),recompute(0.4),$(B 0.4)"
grep -h "mode=budget\|^\[[0-9]* s\]" $OUT/resnet50_recompute.err | grep -v "offloads\|measured on\|plan graph" | cut -c1-300 | tail -30
gzip -f $OUT/resnet50_recompute.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/resnet50_recompute.json
