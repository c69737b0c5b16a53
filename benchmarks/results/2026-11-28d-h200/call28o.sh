#!/usr/bin/env bash
# Twenty-eighth session, call O: item 3 at PyTorch's 0.8 point on the decoder, paired (plain Inductor timed before
# and after every block of another variant; a second inductor row is the method's noise): PyTorch's recompute(0.8)
# against offload_pass's budgets 0.8 and 0.6 (call K, one pass: 1.013 x against 1.027 x; call N: 1.028 x against
# 1.026 x).
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
bench decoder_paired 560 --mark none --interleave 4 --paired --variants "inductor,recompute(0.8),$(B 0.8),$(B 0.6),inductor"
tail -1 $OUT/decoder_paired.err
grep -h "Traceback\|out of reach by\|predicted per activation_memory_budget" $OUT/decoder_paired.err | cut -c1-300
gzip -f $OUT/*.err
python - $OUT/decoder_paired.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ref = d["results"][0]
print("| variant | paired sync | paired back to back | step ms | peak / Ind | offl MiB | recomp MiB |")
for r in d["results"]:
    print(f'| {r["variant"].replace("offload_pass[none](mode=budget;memory_budget=", "B(")} | {r.get("paired_slowdown", float("nan")):.3f} | '
          f'{r.get("paired_unsynced_slowdown", float("nan")):.3f} | {r["step_ms"]:.2f} | {r["peak_mib"] / ref["peak_mib"]:.3f} | '
          f'{r.get("offloaded_mib") or 0:.0f} | {r.get("recomputed_mib") or 0:.0f} |', r.get("error", ""))
    print("   ratios", [round(x, 3) for x in r.get("paired_rounds", [])])
PY
