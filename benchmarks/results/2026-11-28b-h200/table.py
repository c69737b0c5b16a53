"""Print the rows of bench_offload.py JSON files as one table (twenty-sixth session's calls)."""
import json
import sys

for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e)
        continue
    print(f, d.get("device"))
    ref = d["results"][0]
    print("| variant | step ms | sync / Ind | back to back / Ind | host fwd ms (range) | fwd ms | peak MiB | peak / Ind | offl MiB | recomp MiB | re-plans | pred step err | pred peak err |")
    for r in d["results"]:
        reasons = [c.get("replan_reason") for c in r.get("checks") or []]
        g = lambda k, fmt="{:.3f}": (fmt.format(r[k]) if isinstance(r.get(k), (int, float)) else "-")
        rng = r.get("host_forward_range_ms") or ("-", "-")
        rng = f"{rng[0]:.1f}-{rng[1]:.1f}" if isinstance(rng[0], float) else "-"
        peak = r.get("peak_mib")
        print(f'| {r["variant"][-90:]} | {g("step_ms", "{:.2f}")} | {g("slowdown")} | {g("unsynced_slowdown")} | '
              f'{g("host_forward_ms", "{:.2f}")} ({rng}) | {g("forward_ms", "{:.2f}")} | {g("peak_mib", "{:.1f}")} | '
              f'{(peak / ref["peak_mib"]) if peak else float("nan"):.3f} | {g("offloaded_mib", "{:.0f}")} | {g("recomputed_mib", "{:.0f}")} | '
              f'{reasons} | {g("predicted_step_error", "{:+.3f}")} | {g("predicted_peak_error", "{:+.3f}")} |'
              + (" ERROR " + str(r["error"])[:200] if "error" in r else ""))
