"""plot_budgets_hf_llama.json: call E's HF Llama rows, with the two rows call E did not time added from other
processes, each rescaled by its own process's plain Inductor (step and peak as fractions of it) and labelled:
PyTorch's recompute(0.2) (the twenty-sixth session's call E, benchmarks/results/2026-11-28b-h200) and ours at
memory_budget=0.4 (the thirty-third session's call C, benchmarks/results/2026-11-29b-h200, the final code).

    python benchmarks/results/2026-11-29c-h200/merge_hf_budgets.py
"""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
results = os.path.dirname(here)
report = json.load(open(os.path.join(here, "callE_hf_budgets.json")))
ref = report["results"][0]
assert ref["variant"] == "inductor"


def added(path: str, variant: str, label: str) -> dict:
    other = json.load(open(path))["results"]
    own_ref = other[0]
    row = next(r for r in other if r["variant"] == variant)
    return {
        **{k: row.get(k) for k in ("variant", "offloaded_mib", "recomputed_mib", "recompute_level")},
        "step_ms": row["step_ms"] / own_ref["step_ms"] * ref["step_ms"],
        "peak_mib": row["peak_mib"] / own_ref["peak_mib"] * ref["peak_mib"],
        "label": label,
    }


report["results"] += [
    added(os.path.join(results, "2026-11-28b-h200", "callE_hf_item3_low.json"), "recompute(0.2)", "0.2 (26th session)"),
    added(os.path.join(results, "2026-11-29b-h200", "callC_hf_check.json"),
          "offload_pass[none](mode=budget;memory_budget=0.4)", "0.4 (33rd session)"),
]
report["note"] = ("call E of the thirty-fourth session; the rows labelled with a session come from that session's "
                  "process, step and peak rescaled by its own plain Inductor")
json.dump(report, open(os.path.join(here, "plot_budgets_hf_llama.json"), "w"), indent=1)
print("wrote plot_budgets_hf_llama.json")
