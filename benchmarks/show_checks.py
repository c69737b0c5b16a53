"""Print, per variant of a bench_offload.py JSON file, the step and peak
measured by the benchmark against the step simulator's prediction, and the
device's check of each plan (the median of calls 6-8 of its graph, before and after a
re-plan): python benchmarks/show_checks.py OUT/name.json"""

from __future__ import annotations

import json
import sys


def _pct(value: object) -> str:
    return "-" if value is None else f"{value:+.1%}"


def main(path: str) -> None:
    data = json.load(open(path))
    results = data["results"] if isinstance(data, dict) and "results" in data else data
    for r in results:
        if r.get("error"):
            print(f"{r['variant']}: {r['error']}")
            continue
        unsynced = r.get("unsynced_step_ms")
        unsynced = "" if unsynced is None else (
            f" (unsynchronized {unsynced:.2f} ms: {_pct(r.get('predicted_unsynced_error'))})"
        )
        print(
            f"{r['variant']}: step {r['step_ms']:.2f} ms, peak {r['peak_mib']:.0f} MiB; predicted step "
            f"{_pct(r.get('predicted_step_error'))}{unsynced}, peak {_pct(r.get('predicted_peak_error'))}"
        )
        for check in r.get("checks") or []:
            state = "re-planned" if check["calibrated"] else "first plan"
            print(f"    {check['graph']} ({state}): {check['text']}")
        for line in r.get("calibrations") or []:
            print(f"    {line}")


if __name__ == "__main__":
    for name in sys.argv[1:]:
        main(name)
