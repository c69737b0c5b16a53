#!/usr/bin/env bash
# Twenty-sixth session, call C: the budget-0.6 plan issued its forward in 11.4 ms in bench_offload.py's process (call
# A) and in 6.3 ms in host_profile.py's (call B, the same 12 copies): what else used the host's CPUs over the timed
# steps (host_load.py: threads here, other processes, the cgroup's throttling), in the benchmark's process.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
git log --oneline -1 2>/dev/null
nproc; cat /sys/fs/cgroup/cpu.max 2>/dev/null; python -c "import torch; print(torch.get_num_threads())"
source benchmarks/bench_lib.sh
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_06b 560 $H --mark none --host-profile $OUT/host --variants "inductor,offload_pass[none](mode=budget;memory_budget=0.6)"
tail -1 $OUT/hf_06b.err
gzip -f $OUT/*.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/hf_06b.json
python -c "
import json; d=json.load(open('$OUT/hf_06b.json'))
for r in d['results']: print(r['variant'][-40:], r.get('host_load'))"
for f in $OUT/host/*.txt; do echo "== $f"; sed -n '/other Python threads/,$p' $f | head -40; done
