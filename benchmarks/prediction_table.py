"""Predicted against measured, per variant of ``bench_offload.py`` JSON files:
the last plan's predicted step and peak against its own measured calls (the
runtime's median of three), its predicted step against the benchmark's
synchronized step, and "as run" (the prediction plus the time the runtime
measured outside the graph, against the synchronized loop's period). Prints
one Markdown table per file; variants with no plan (PyTorch's own) show "-".

    python benchmarks/prediction_table.py benchmarks/results/auto_front_decoder_h200_2026-11-29.json [...]
"""

from __future__ import annotations

import json
import sys


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def rows(report: dict) -> list[str]:
    """One Markdown row per variant of a bench_offload.py report."""
    out = []
    for r in report["results"]:
        checks = r.get("checks") or []
        own = f"{_pct(checks[-1]['step_error'])}, {_pct(checks[-1]['peak_error'])}" if checks else "-"
        out.append(f"| {r['variant']} | {len(checks)} | {own} | {_pct(r.get('predicted_step_error'))} "
                   f"| {_pct(r.get('as_run_error'))} |")
    return out


def main() -> None:
    for path in sys.argv[1:]:
        with open(path) as f:
            report = json.load(f)
        print(path)
        print("| variant | plans | last plan: own calls step, peak error | vs the benchmark's step | as run |")
        print("|---|---|---|---|---|")
        print("\n".join(rows(report)))


if __name__ == "__main__":
    main()
