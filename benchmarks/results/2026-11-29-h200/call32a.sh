#!/usr/bin/env bash
# Thirty-second session, call A: where ResNet-50's time goes under mode="budget" at 0.8 (the thirty-first
# session: the same partition as PyTorch's recompute(0.8), 34.8 against 27.3 ms). timm ResNet-50, bf16, batch
# 128, same process, paired against plain Inductor: PyTorch's recompute(0.8) with and without the two Inductor
# options the backend turns off (allow_buffer_reuse, reorder_for_peak_memory), and ours with and without them.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
OFF="{allow_buffer_reuse=false;reorder_for_peak_memory=false}"
ON="{allow_buffer_reuse=true;reorder_for_peak_memory=true}"
bench resnet50_options 560 --model timm:resnet50 --batch 128 --mark none --log info --interleave 3 --paired \
  --variants "inductor,recompute(0.8),recompute(0.8)$OFF,$(B 0.8),$(B 0.8)$ON"
grep -h "mode=budget\|^\[[0-9]* s\]" $OUT/resnet50_options.err | grep -v "offloads\|measured on\|plan graph" | cut -c1-250 | tail -20
gzip -f $OUT/resnet50_options.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/resnet50_options.json
python -c "
import json,sys
for r in json.load(open('$OUT/resnet50_options.json'))['results']:
    g=lambda k: r.get(k)
    print(r['variant'][-75:], '| paired', g('paired_slowdown'), '| paired b2b', g('paired_unsynced_slowdown'), '| peak', round(g('peak_mib') or 0,1), '| host fwd', round(g('host_forward_ms') or 0,2))
"
