"""Plot bench_offload.py results: step time and peak memory per variant.

  python benchmarks/plot_results.py out/h2048_all.json out/h4096.json ... -o docs/benchmarks.png

One row per JSON file (one model / marker set); left: step time with plain
Inductor and the two-way floor as lines; right: peak memory with the bytes
each variant offloaded stacked on top in a lighter shade. Variants that
crashed are shown as "crashed" at zero height, not left out.
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _title(report: dict) -> str:
    a = report["args"]
    if a["model"] == "moe":
        model = f"MoE {a['layers']}L h{a['hidden']} {a['experts']}x ffn {a['ffn']}, batch {a['batch']}"
    else:
        model = f"decoder {a['layers']}L h{a['hidden']}, seq {a['seq']}, batch {a['batch']}"
    return f"{model} · marked: {a['mark']}"


def plot(paths: list[str], out: str) -> None:
    reports = [json.load(open(p)) for p in paths]
    fig, axes = plt.subplots(len(reports), 2, figsize=(13, 3.2 * len(reports)), squeeze=False)
    for row, report in zip(axes, reports):
        results = report["results"]
        names = [r["variant"] for r in results]
        ref = next((r for r in results if r["variant"] == "inductor" and "error" not in r), None)
        ok = ["error" not in r for r in results]
        step = [r.get("step_ms", 0.0) if k else 0.0 for r, k in zip(results, ok)]
        peak = [r.get("peak_mib", 0.0) if k else 0.0 for r, k in zip(results, ok)]
        y = range(len(names))
        ax = row[0]
        ax.barh(y, step, color=["#888" if n == "inductor" else "#1f77b4" for n in names])
        if ref:
            ax.axvline(ref["step_ms"], color="k", lw=0.8, ls="--", label="inductor")
        floors = [r["floor2_ms"] for r in results if r.get("floor2_ms") and r["variant"].startswith("offload_pass")]
        if floors:
            ax.axvline(floors[0], color="tab:red", lw=0.8, ls=":", label="two-way copy floor")
        for i, (v, k) in enumerate(zip(step, ok)):
            ax.text(v, i, f" {v:.1f}" if k else " crashed", va="center", fontsize=8)
        ax.set_yticks(list(y), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("step time (ms)")
        ax.set_title(_title(report), fontsize=9, loc="left")
        ax.set_xlim(0, 1.2 * max(step + floors + [1.0]))
        ax.legend(fontsize=7, loc="upper right", framealpha=0.9)
        ax = row[1]
        ax.barh(y, peak, color=["#888" if n == "inductor" else "#2ca02c" for n in names])
        for i, (r, v, k) in enumerate(zip(results, peak, ok)):
            label = " crashed"
            if k:
                label = f" {v:.0f} MiB"
                if r.get("R") is not None:
                    label += f"  (R {r['R']:.2f})"
            ax.text(v, i, label, va="center", fontsize=8)
        ax.set_xlim(0, 1.3 * max(peak + [1.0]))
        ax.set_yticks(list(y), [""] * len(names))
        ax.invert_yaxis()
        ax.set_xlabel("peak memory of a step (MiB)")
    fig.suptitle(
        f"{reports[0]['device']} · torch {reports[0]['torch']} · "
        f"pinned copies d2h {reports[0]['bandwidth_gbps']['d2h']:.0f} / h2d {reports[0]['bandwidth_gbps']['h2d']:.0f} GB/s",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="+", help="bench_offload.py --json outputs")
    p.add_argument("-o", "--out", default="benchmarks.png")
    args = p.parse_args()
    plot(args.json, args.out)


if __name__ == "__main__":
    main()
