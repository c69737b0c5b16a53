#!/usr/bin/env bash
# Thirty-fourth session, call E: item 3 on HF Llama on the final code, both planners in one process (the twenty-sixth
# session's calls D and E in one, before the thirty-third session's change to the selection's reloads), one round.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_budgets 395 $H --mark none --log info --variants "inductor,recompute(0.8),$(B 0.8),$(B 0.6),recompute(0.6),recompute(0.4),recompute(0.2)"
grep -h "planned again\|Traceback\|out of reach by" $OUT/hf_budgets.err | cut -c1-220 | tail -8
gzip -f $OUT/hf_budgets.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_budgets.json
python -c "
import json
d = json.load(open('$OUT/hf_budgets.json'))
print('skipped', d.get('skipped_variants'))
for r in d['results']:
    print(r['variant'][-26:], r.get('recompute_level'), round(r['wall_s']))
"
