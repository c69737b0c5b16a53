#!/usr/bin/env bash
# Thirty-second session, call C (the device time left): ResNet-50 (timm, bf16, batch 128) mode="budget" at 0.6
# paired against plain Inductor beside PyTorch's recompute(0.4) (call B timed out before its paired rounds), then
# HF Llama (8 x 2048) at budget 0.6 with the search change (its trials' copies logged).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench resnet50_paired 300 --model timm:resnet50 --batch 128 --mark none --log info --interleave 3 --paired \
  --variants "inductor,recompute(0.4),$(B 0.6)"
bench hf_budget 200 --model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1 --mark none --log info \
  --variants "inductor,$(B 0.6)"
for n in resnet50_paired hf_budget; do
  grep -h "mode=budget: offload plus\|^\[[0-9]* s\]" $OUT/$n.err | cut -c1-400 | tail -8
  gzip -f $OUT/$n.err
  python benchmarks/results/2026-11-28b-h200/table.py $OUT/$n.json
done
python -c "
import json
for r in json.load(open('$OUT/resnet50_paired.json'))['results']:
    g=lambda k: r.get(k)
    print(r['variant'][-75:], '| paired', g('paired_slowdown'), '| paired b2b', g('paired_unsynced_slowdown'), '| peak', round(g('peak_mib') or 0,1), '| host fwd', round(g('host_forward_ms') or 0,2))
"
