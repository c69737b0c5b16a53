#!/usr/bin/env bash
# Twenty-sixth session, call A: item 3 on HF Llama, both planners in one process at PyTorch's budget 0.6 and at the
# peak it reaches (0.790 in earlier sessions: ours asked for 0.79), and ours at 0.6, whose host took 12.0 ms to issue
# the forward in the twenty-fifth session: --host-profile writes where the host's forward time goes per variant.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
source benchmarks/bench_lib.sh
B() { echo "offload_pass[none](mode=budget;memory_budget=$1)"; }
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_06 560 $H --mark none --host-profile $OUT/host --variants "inductor,$(B 0.6),recompute(0.6),$(B 0.79)"
tail -1 $OUT/hf_06.err
grep -h "planned again\|not planned again\|Traceback\|out of reach" $OUT/hf_06.err | cut -c1-240
gzip -f $OUT/*.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_06.json
for f in $OUT/host/*.txt; do echo "== $f"; sed -n 1,22p $f | cut -c1-150; done
