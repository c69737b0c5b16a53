"""Item 1 per variant from a bench_offload.py JSON: the last plan's prediction against its own measured calls
(runtime/measure.py, calls 40-42 or the re-plan's), against the benchmark's synchronized step, and as run (the
prediction plus the time measured outside the graph, against the synchronized loop's period).

    python benchmarks/results/2026-11-29c-h200/item1_table.py FILE.json [...]
"""
import json
import sys

for path in sys.argv[1:]:
    d = json.load(open(path))
    print(path)
    print("| variant | plans | last plan: own calls step, peak error | vs the benchmark's step | as run |")
    print("|---|---|---|---|---|")
    for r in d["results"]:
        checks = r.get("checks") or []
        pe = r.get("predicted_step_error")
        ar = r.get("as_run_error")
        if checks:
            last = checks[-1]
            own = f"{last['step_error']:+.1%}, {last['peak_error']:+.1%}"
        else:
            own = "-"
        fmt = lambda x: "-" if x is None else f"{x:+.1%}"
        print(f"| {r['variant']} | {len(checks)} | {own} | {fmt(pe)} | {fmt(ar)} |")
