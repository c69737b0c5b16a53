#!/usr/bin/env bash
# Twenty-sixth session, call B: why HF Llama's budget-0.6 plan issues its forward in 11.4 ms (plain Inductor 5.8; call
# A: every call of the forward about 2x slower on the host, torch.mm and kernel launches alike): the threads' CPU time
# over the timed steps, and the forward's host time with the copies shrunk to 4 KiB, stubbed out, and the op's body gone.
set -uo pipefail
export PYTHONPATH=$PWD
git log --oneline -1 2>/dev/null
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
timeout 560 python benchmarks/host_profile.py $OUT/host --breakdown --warmup 128 \
  --variant "offload_pass[none](mode=budget;memory_budget=0.6)" $H > $OUT/host.txt 2> $OUT/host.err
echo "exit $?"
grep -v "^ *[a-z_0-9]* *[a-z._0-9\[\]]* *model\.\|^primals\|^ *|" $OUT/host.txt | cut -c1-400 | tail -30
grep -h "planned again\|Traceback\|Error" $OUT/host.err | cut -c1-240 | head
gzip -f $OUT/host.err
