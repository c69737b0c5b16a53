"""Memory saved against overhead: hand-chosen marker sets and mode=auto / budget.

Reads the JSON that ``bench_offload.py --json`` writes (one file per model),
plots per model the measured peak reduction (MiB) against the step-time
overhead over plain Inductor, with

- hand-chosen marker sets (``offload_pass[MARK]`` variants) as grey dots and
  their Pareto front as a grey step line,
- ``mode=auto`` points in blue (labelled with ``max_overhead``) and
  ``mode=budget`` points in orange, each with its own prediction as a hollow
  marker of the same colour joined to the measurement,
- the 2 % overhead line and the copy-out window (d2h bandwidth x Inductor's
  measured forward time) as dashed lines,

and prints a table of the same points. The overhead is the paired one
(``paired_slowdown``: against the plain Inductor blocks timed right before
and after, ``bench_offload.py --paired``) where the report has it, else
the round-robin ``slowdown``.

  python benchmarks/plot_pareto.py OUT/auto_h2048.json OUT/auto_h4096.json -o pareto.png
"""

from __future__ import annotations

import argparse
import json
import os


def points(report: dict) -> list[dict]:
    """One row per measured offloading variant of a report."""
    rows = []
    for r in report["results"]:
        if "error" in r or r["variant"] == "inductor" or r.get("slowdown") is None:
            continue
        name = r["variant"]
        kind = "auto" if "mode=auto" in name else "budget" if "mode=budget" in name else "hand"
        rows.append({
            "variant": name,
            "kind": kind,
            "mark": r.get("mark"),
            "overhead": r.get("paired_slowdown", r["slowdown"]) - 1,
            "freed_mib": r["peak_reduction_mib"],
            "window_mib": r.get("window_mib"),
            "predicted_overhead": (r["predicted_slowdown"] - 1) if r.get("predicted_slowdown") else None,
            "predicted_freed_mib": r.get("predicted_reduction_mib"),
            "step_ms": r["step_ms"],
            "peak_mib": r["peak_mib"],
        })
    return rows


def pareto_front(rows: list[dict]) -> list[dict]:
    """The rows no other row beats on both overhead (lower) and memory freed (higher)."""
    front, best = [], float("-inf")
    for row in sorted(rows, key=lambda r: (r["overhead"], -r["freed_mib"])):
        if row["freed_mib"] > best:
            front.append(row)
            best = row["freed_mib"]
    return front


def title_of(report: dict) -> str:
    a = report["args"]
    model = {"moe": "MoE", "hf_llama": "HF Llama", "hf_qwen3_moe": "HF Qwen3-MoE"}.get(a.get("model"), "decoder")
    return f"{a['layers']}-layer {model}, hidden {a['hidden']}, batch {a['batch']}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+")
    p.add_argument("-o", "--output", default="pareto.png")
    args = p.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Reports of the same model (several runs: hand-chosen marks in one,
    # mode=auto in another) share one panel; each row keeps the overhead
    # measured against the Inductor run of its own report.
    by_model: dict[str, tuple[str, dict]] = {}
    for path in args.reports:
        with open(path) as f:
            report = json.load(f)
        key = title_of(report)
        if key in by_model:
            name, merged = by_model[key]
            merged["results"] = merged["results"] + report["results"]
            by_model[key] = (f"{name} + {os.path.basename(path)}", merged)
        else:
            by_model[key] = (os.path.basename(path), report)
    reports = list(by_model.values())
    fig, axes = plt.subplots(1, len(reports), figsize=(6.5 * len(reports), 5), squeeze=False)
    for ax, (name, report) in zip(axes[0], reports):
        rows = points(report)
        hand = [r for r in rows if r["kind"] == "hand"]
        if hand:
            ax.scatter([100 * r["overhead"] for r in hand], [r["freed_mib"] for r in hand], color="0.5", s=18, label="hand-chosen marks")
            front = pareto_front(hand)
            ax.step([100 * r["overhead"] for r in front], [r["freed_mib"] for r in front], where="post", color="0.5", lw=1)
            for r in hand:
                ax.annotate(r["mark"], (100 * r["overhead"], r["freed_mib"]), fontsize=7, color="0.4", xytext=(3, -8), textcoords="offset points")
        for kind, color in (("auto", "tab:blue"), ("budget", "tab:orange")):
            chosen = [r for r in rows if r["kind"] == kind]
            if not chosen:
                continue
            ax.scatter([100 * r["overhead"] for r in chosen], [r["freed_mib"] for r in chosen], color=color, s=30, label=f"mode={kind} (measured)", zorder=3)
            for r in chosen:
                if r["predicted_overhead"] is not None and r["predicted_freed_mib"] is not None:
                    px, py = 100 * r["predicted_overhead"], r["predicted_freed_mib"]
                    ax.scatter([px], [py], facecolors="none", edgecolors=color, s=30, zorder=3)
                    ax.plot([px, 100 * r["overhead"]], [py, r["freed_mib"]], color=color, lw=0.6, ls=":")
                label = r["variant"].split("(", 1)[1].rstrip(")").replace("mode=auto;", "").replace("mode=budget;", "")
                ax.annotate(label, (100 * r["overhead"], r["freed_mib"]), fontsize=7, color=color, xytext=(3, 3), textcoords="offset points")
        ax.axvline(2, color="tab:green", ls="--", lw=0.8, label="2 % overhead")
        window = next((r["window_mib"] for r in rows if r["window_mib"]), None)
        if window:
            ax.axhline(window, color="tab:red", ls="--", lw=0.8, label="d2h bandwidth x forward")
        # Linear up to 10 %, where the interesting points are; logarithmic beyond.
        ax.set_xscale("symlog", linthresh=10, linscale=2)
        ticks = [t for t in (-5, 0, 2, 5, 10, 20, 50, 100, 200, 500) if t <= max(10, 100 * max(r["overhead"] for r in rows))]
        left = min(-1.0, 100 * min(r["overhead"] for r in rows) - 1)
        ticks = [t for t in ticks if t >= left]
        ax.set_xlim(left=left)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.set_xlabel("step-time overhead over Inductor (%)")
        ax.set_ylabel("peak memory saved (MiB)")
        ax.set_title(title_of(report), fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
        print(f"## {name}: {title_of(report)}")
        print("| variant | overhead | freed MiB | freed / window | predicted overhead | predicted freed MiB |")
        print("| --- | --- | --- | --- | --- | --- |")
        for r in sorted(rows, key=lambda r: r["overhead"]):
            ratio = f"{r['freed_mib'] / r['window_mib']:.2f}" if r["window_mib"] else "-"
            po = f"{100 * r['predicted_overhead']:+.1f} %" if r["predicted_overhead"] is not None else "-"
            pf = f"{r['predicted_freed_mib']:.0f}" if r["predicted_freed_mib"] is not None else "-"
            print(f"| {r['variant']} | {100 * r['overhead']:+.1f} % | {r['freed_mib']:.0f} | {ratio} | {po} | {pf} |")
    fig.suptitle("Memory saved against step-time overhead (hollow: prediction)", fontsize=11)
    fig.tight_layout()
    fig.savefig(args.output, dpi=130)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
