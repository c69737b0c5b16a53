#!/usr/bin/env bash
# Twenty-second session, call F: the decoder front once more, with a re-plan that picks an earlier measured plan's copies running that plan (no new round of turns), timed paired, five rounds.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
A() { echo "offload_pass[none](mode=auto;max_overhead=$1)"; }
bench dec_front 560 --interleave 5 --paired --variants "inductor,$(A 0.01),$(A 0.02),$(A 0.05),$(A 0.1),$(A 0.3),offload_pass[attn:3],offload_pass[attn:4],offload_pass[attn-but-last],inductor"
tail -1 $OUT/dec_front.err
grep -h "plain Inductor's graph not\|could not be planned\|Traceback\|instead (graph\|room" $OUT/dec_front.err | cut -c1-300 | head -12
grep -h "^mode=auto" $OUT/dec_front.err | cut -c1-260
python diag/summ16.py $OUT/dec_front.json | cut -c1-200 > $OUT/summ16.txt
python diag/summ21.py $OUT/dec_front.json
python -c "
import json,os
d=json.load(open(os.environ['OUT']+'/dec_front.json'))
for r in d['results']:
    print(r['variant'][:48], 'settle', r.get('settle_steps'), [(c['graph'], c['call']) for c in r.get('checks') or []], r.get('graphs_in_step'))
"
grep -h "instead of measuring them again" $OUT/dec_front.err | cut -c1-300
