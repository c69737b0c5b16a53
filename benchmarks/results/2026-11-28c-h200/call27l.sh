#!/usr/bin/env bash
# Twenty-seventh session, call L (the device time left after call K, ba15a1f): HF Llama's mode="budget" at 0.6 with
# recompute.search_goes_on (the twenty-sixth session and call I: level 0.9, 1.022-1.043 x, 0.595-0.596).
set -uo pipefail
export PYTHONPATH=$PWD; out=$OUT; source benchmarks/bench_lib.sh
bench hf_06 270 --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1 --mark none \
  --variants "inductor,offload_pass[none](mode=budget;memory_budget=0.6)"
grep -h "predicted per activation_memory_budget" $OUT/hf_06.err | sed 's/.*predicted per/per/' | cut -c1-400
gzip -f $OUT/*.err; python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_06.json
