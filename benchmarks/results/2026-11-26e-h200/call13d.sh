#!/usr/bin/env bash
# Thirteenth session, call D: where HF Llama's mode=budget 0.6 compile spends its time (log + stacks).
set -uo pipefail
export PYTHONPATH=$PWD
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
DUMP=45 timeout 570 python diag/logged_bench.py $H --mark none --variants "offload_pass[none](mode=budget;memory_budget=0.6)" --json $OUT/b06.json > $OUT/b06.log 2> $OUT/b06.err
echo "exit $?"
grep -E "^\[" $OUT/b06.log | cut -c1-220 | tail -40
python - <<'PY'
import os, collections
t = open(os.environ["OUT"] + "/stacks.txt").read().split("Timeout (")
print(len(t) - 1, "dumps")
for dump in t[1:]:
    lines = [l.strip() for l in dump.splitlines() if l.strip().startswith("File")]
    ours = [l for l in lines if "offload_pass" in l or "torch/_functorch" in l or "torch/_inductor" in l][:6]
    print("---"); print("\n".join(x[:200] for x in ours))
PY
