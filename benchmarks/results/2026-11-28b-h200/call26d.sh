#!/usr/bin/env bash
# Twenty-sixth session, calls D and E: item 3 on HF Llama, both planners in one process per call, one variant after
# the other (no --interleave: a process holding both kinds of model segfaulted in the thirteenth session). D: PyTorch's
# recompute at 0.8 and 0.6, ours at 0.8, at 0.79 (the peak PyTorch's 0.6 reaches, 0.790 of plain Inductor's) and 0.6.
# E: PyTorch's 0.4 and 0.2, ours at 0.6 (below both; 0.4 is out of reach, the twenty-fifth session: 0.540 at 2.3 x). Each row says what else used the host's CPUs (host_load).
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
source benchmarks/bench_lib.sh
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
if [ "${1:-D}" = D ]; then
  name=hf_item3_high; variants="inductor,recompute(0.8),$(B 0.8),recompute(0.6),$(B 0.79),$(B 0.6)"
else
  name=hf_item3_low; variants="inductor,recompute(0.4),recompute(0.2),$(B 0.6)"
fi
bench $name 570 $H --mark none --variants "$variants"
tail -1 $OUT/$name.err
grep -h "planned again\|Traceback\|out of reach" $OUT/$name.err | cut -c1-240
gzip -f $OUT/*.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/$name.json
python -c "
import json; d=json.load(open('$OUT/$name.json'))
for r in d['results']: print(r['variant'][-40:], r.get('wall_s'), r.get('host_load'))"
