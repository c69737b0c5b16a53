"""Peak against step time: offload_pass mode="budget" (offload plus recompute)
and PyTorch's recompute-only activation_memory_budget, one panel per model.

Reads the JSON of ``run_budgets.sh`` (``bench_offload.py --json``); x is the
step time over plain Inductor's, y the measured peak over plain Inductor's;
each point is labelled with its budget (or its row's "label", which a
merged report gives a row from another process), and a dotted line per budget of
ours marks the peak asked for. Prints the same points as a table.

  python benchmarks/plot_budgets.py OUT/budgets_decoder.json OUT/budgets_hf_llama.json -o budgets.png
"""

from __future__ import annotations

import argparse
import json
import re


def rows(report: dict) -> list[dict]:
    """One row per measured variant: planner, budget, slowdown, peak fraction."""
    ref = next(r for r in report["results"] if r["variant"] == "inductor" and "error" not in r)
    out = []
    for r in report["results"]:
        if "error" in r or r["variant"] == "inductor":
            continue
        match = re.search(r"memory_budget=([0-9.]+)", r["variant"]) or re.match(r"recompute\(([0-9.]+)\)", r["variant"])
        out.append({
            "planner": "offload_pass" if r["variant"].startswith("offload_pass") else "pytorch recompute",
            "budget": float(match.group(1)),
            "slowdown": r["step_ms"] / ref["step_ms"],
            "peak_fraction": r["peak_mib"] / ref["peak_mib"],
            "step_ms": r["step_ms"],
            "peak_mib": r["peak_mib"],
            "offloaded_mib": r.get("offloaded_mib"),
            "recomputed_mib": r.get("recomputed_mib"),
            "levels": r.get("recompute_level"),
            # A merged report's row from another process says which ("label").
            "label": r.get("label"),
        })
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("reports", nargs="+")
    p.add_argument("-o", "--output", default="budgets.png")
    args = p.parse_args()
    reports = [json.load(open(path)) for path in args.reports]
    print("| model | planner | budget | step ms | slowdown | peak MiB | peak / Inductor | offloaded MiB | recomputed MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path, report in zip(args.reports, reports):
        for r in rows(report):
            print(
                f"| {report['args']['model']} | {r['planner']} | {r['budget']} | {r['step_ms']:.2f} | "
                f"{r['slowdown']:.3f} | {r['peak_mib']:.0f} | {r['peak_fraction']:.3f} | "
                f"{r['offloaded_mib'] if r['offloaded_mib'] is None else round(r['offloaded_mib'])} | "
                f"{r['recomputed_mib'] if r['recomputed_mib'] is None else round(r['recomputed_mib'])} |"
            )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(reports), figsize=(6 * len(reports), 4.5), squeeze=False)
    for ax, report in zip(axes[0], reports):
        data = rows(report)
        for planner, color in (("pytorch recompute", "tab:grey"), ("offload_pass", "tab:blue")):
            mine = sorted((r for r in data if r["planner"] == planner), key=lambda r: (-r["budget"], r["slowdown"]))
            ax.plot([r["slowdown"] for r in mine], [r["peak_fraction"] for r in mine], "o-", color=color, label=planner)
            for r in mine:
                ax.annotate(r["label"] or f"{r['budget']:g}", (r["slowdown"], r["peak_fraction"]), textcoords="offset points",
                            xytext=(4, 4), color=color, fontsize=8)
        for b in sorted({r["budget"] for r in data}):
            ax.axhline(b, color="tab:blue", lw=0.6, ls=":")
        ax.plot([1.0], [1.0], "ks", label="plain Inductor")
        ax.set_xlabel("step time / plain Inductor")
        ax.set_ylabel("peak memory / plain Inductor")
        ax.set_title(f"{report['args']['model']} ({report.get('device', '?')}, torch {report.get('torch', '?')})", fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
