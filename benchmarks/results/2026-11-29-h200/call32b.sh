#!/usr/bin/env bash
# Thirty-second session, call B: ResNet-50 (timm, bf16, batch 128) under mode="budget" at 0.6 and 0.8 after the
# search change (a level that did worse for its copies no longer ends the search), paired against plain Inductor
# beside PyTorch's recompute(0.4) (the thirty-first session: 0.563 of Inductor's peak at 1.10 x).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench resnet50_budget 540 --model timm:resnet50 --batch 128 --mark none --log info --interleave 3 --paired \
  --variants "inductor,recompute(0.4),$(B 0.6),$(B 0.8)"
grep -h "mode=budget\|^\[[0-9]* s\]" $OUT/resnet50_budget.err | grep -v "offloads\|measured on\|plan graph" | cut -c1-300 | tail -30
gzip -f $OUT/resnet50_budget.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/resnet50_budget.json
python -c "
import json
for r in json.load(open('$OUT/resnet50_budget.json'))['results']:
    g=lambda k: r.get(k)
    print(r['variant'][-75:], '| paired', g('paired_slowdown'), '| paired b2b', g('paired_unsynced_slowdown'), '| peak', round(g('peak_mib') or 0,1), '| host fwd', round(g('host_forward_ms') or 0,2))
"
