#!/usr/bin/env bash
# Twenty-eighth session, call N: why offload_pass's budget 0.8 on the decoder ran 1.4 % slower than PyTorch's
# recompute(0.8) (call K of the twenty-seventh session) although both partitions save the same 112 tensors
# (partition_probe.py, call M): the backend's Inductor options (allow_buffer_reuse and reorder_for_peak_memory off),
# each way round, in one process.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
off='{allow_buffer_reuse=false;reorder_for_peak_memory=false}'
on='{allow_buffer_reuse=true;reorder_for_peak_memory=true}'
bench decoder_reuse 540 --mark none --variants "inductor,recompute(0.8),recompute(0.8)$off,recompute(0.8){allow_buffer_reuse=false},$(B 0.8),$(B 0.8)$on"
tail -1 $OUT/decoder_reuse.err
grep -h "Traceback\|out of reach by\|predicted per activation_memory_budget" $OUT/decoder_reuse.err | cut -c1-300
gzip -f $OUT/*.err
python benchmarks/results/2026-11-28b-h200/table.py $OUT/decoder_reuse.json | sed "s/offload_pass\[none\](mode=budget;memory_budget=/B(/"
