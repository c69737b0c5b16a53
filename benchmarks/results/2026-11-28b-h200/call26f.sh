#!/usr/bin/env bash
# Twenty-sixth session, call F (the device time left): HF Qwen3-MoE (grouped_mm experts), not measured since the
# fifth session: item 1's predictions on the final code, every role marked and mode="budget" at 0.6.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
source benchmarks/bench_lib.sh
Q="--model hf_qwen3_moe --layers 4 --hidden 2048 --heads 16 --ffn 768 --experts 16 --batch 1"
bench qwen 185 $Q --mark roles=all --variants "inductor,offload_pass,offload_pass[none](mode=budget;memory_budget=0.6)"
grep -h "^\[\|planned again\|Traceback\|out of reach" $OUT/qwen.err | cut -c1-240
gzip -f $OUT/*.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/qwen.json
