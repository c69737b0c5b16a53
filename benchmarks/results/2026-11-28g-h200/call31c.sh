#!/usr/bin/env bash
# Thirty-first session, call C: HF Llama (8 x 2048, ffn 5632, seq 4096, bf16) mode="budget" at 0.6 and 0.4 on this
# session's code (levels that would save a set again not partitioned; the selection's out-of-reach shortcut),
# logged level by level with the seconds each took; against the twenty-seventh session's call L (0.6: 0.596, 1.021 x).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench hf_budget 560 --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1 --mark none --log info \
  --variants "inductor,$(B 0.6),$(B 0.4)"
grep -h "mode=budget\|\] \[\|^\[[0-9]* s\]" $OUT/hf_budget.err | grep -v "offloads\|measured on\|plan graph" | cut -c1-300 | tail -40
gzip -f $OUT/hf_budget.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_budget.json
