#!/usr/bin/env bash
# Twenty-second session, call B: the marks guarded by a key each (one guard a marked module) on torch 2.11: the marking tests on the device's CPU build path, and item 4 again (HF Llama, attention and MLP marked), paired, one profiled step each.
set -uo pipefail
export PYTHONPATH=$PWD
out=$OUT
source benchmarks/bench_lib.sh
N=$(python -c "import xdist" 2>/dev/null && echo "-n 8" || echo "")
echo "xdist: $N"; timeout 240 python -m pytest -q -p no:cacheprovider $N tests/test_markers.py tests/test_opt_out.py tests/test_mlp_roles.py tests/test_real_models.py > $OUT/mark_tests.txt 2>&1; echo "mark tests: exit $?"; tail -1 $OUT/mark_tests.txt
grep -h "^FAILED\|^E  " $OUT/mark_tests.txt | head -10
H="--model hf_llama --layers 8 --hidden 2048 --heads 16 --ffn 5632 --batch 1"
bench hf_all 300 $H --mark all --interleave 4 --paired --profile --trace-dir $OUT/traces --variants "inductor,offload_pass,inductor"
tail -2 $OUT/hf_all.err
python benchmarks/trace_gaps.py $OUT/traces/*.json.gz
python - $OUT/traces/all_inductor.json.gz $OUT/traces/all_offload_pass.json.gz <<'PY'
import gzip, json, sys
for path in sys.argv[1:]:
    ev = [e for e in json.load(gzip.open(path, "rt"))["traceEvents"] if e.get("ph") == "X" and e.get("name") == "TorchDynamo Cache Lookup"]
    print(path.rsplit("/", 1)[-1], "Dynamo cache lookups ms:", [round(e["dur"] / 1e3, 3) for e in ev])
PY
python - $OUT/hf_all.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| variant | step | unsync | fwd | bwd | host fwd | vs floor2 | unsync vs floor2 | paired | paired unsync | R | offloaded |")
for r in d["results"]:
    g = lambda k: (f"{r[k]:.3f}" if isinstance(r.get(k), float) else str(r.get(k, "-")))
    print("| " + " | ".join([r["variant"]] + [g(k) for k in ("step_ms", "unsynced_step_ms", "forward_ms", "backward_ms", "host_forward_ms", "vs_floor2", "unsynced_vs_floor2", "paired_slowdown", "paired_unsynced_slowdown", "R", "offloaded_mib")]) + " |")
print("floor2", d["results"][1].get("floor2_ms"), "bandwidth", d["bandwidth_gbps"])
PY
