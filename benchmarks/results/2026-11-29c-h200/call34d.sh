#!/usr/bin/env bash
# Thirty-fourth session, call D: item 3 on the decoder on the final code, both planners in one process (PyTorch's
# recompute-only activation_memory_budget and ours, mode="budget", at 0.8, 0.6, 0.4, 0.2), paired rounds as the
# deadline allows; for the plot of peak against step time.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench dec_budgets 575 --interleave 2 --paired --mark none --log info --variants "inductor,recompute(0.8),$(B 0.8),recompute(0.6),$(B 0.6),recompute(0.4),$(B 0.4),recompute(0.2),$(B 0.2)"
grep -h "planned again\|Traceback\|out of reach by" $OUT/dec_budgets.err | cut -c1-220 | tail -12
grep -h "predicted per activation_memory_budget" $OUT/dec_budgets.err | sed 's/.*predicted per/per/' | cut -c1-300 | tail -8
gzip -f $OUT/dec_budgets.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/dec_budgets.json
python benchmarks/results/2026-11-27e-h200/summ21.py $OUT/dec_budgets.json 2>/dev/null | head -11
