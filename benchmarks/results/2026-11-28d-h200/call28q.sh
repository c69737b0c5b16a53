#!/usr/bin/env bash
# Twenty-eighth session, call Q: item 1 on Qwen3-MoE with every role marked. Its re-plan's own calls measured the
# host issuing the forward in 6.27 ms where the first plan's took 4.47 (twenty-seventh session, call J; -5.9 %).
# Is the re-planned graph slower to issue, or the host slower then? The plan as re-planned against the first plan
# kept (calibrate disabled: no re-plan), paired and interleaved in one process.
set -uo pipefail
out=$OUT
source benchmarks/bench_lib.sh
Q="--model hf_qwen3_moe --layers 4 --hidden 2048 --heads 16 --ffn 768 --experts 16 --batch 1"
bench qwen_host 560 $Q --mark roles=all --interleave 4 --paired --variants "inductor,offload_pass,offload_pass(disabled_passes=calibrate),inductor"
tail -1 $OUT/qwen_host.err
grep -h "Traceback\|Segmentation\|Error" $OUT/qwen_host.err | head -5
gzip -f $OUT/*.err
python - $OUT/qwen_host.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("| variant | paired sync / b2b | step ms | host fwd ms (alone) | fwd ms | offl MiB | copies | plans: step err, host fwd of the measured calls |")
for r in d["results"]:
    checks = "; ".join(f'{c["replan_reason"]}: {c["step_error"]:+.3f}, ' + c["text"].split("the host issued the forward in ")[1].split(",")[0] for c in r.get("checks") or [] if "the host issued" in c["text"])
    print(f'| {r["variant"]} | {r.get("paired_slowdown", float("nan")):.3f} / {r.get("paired_unsynced_slowdown", float("nan")):.3f} | {r["step_ms"]:.2f} | '
          f'{r.get("host_forward_ms", 0):.2f} ({r.get("host_forward_ms_alone", 0):.2f}) | {r.get("forward_ms", 0):.2f} | {r.get("offloaded_mib") or 0:.0f} | {r.get("copies", "-")} | {checks} |', r.get("error", ""))
PY
