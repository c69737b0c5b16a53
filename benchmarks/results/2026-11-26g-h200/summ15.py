"""Item 1 table: per variant, the prediction (graphs only, and as the loop ran it) against the step."""
import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f))
    rows = d if isinstance(d, list) else d.get("results", [])
    b = next((r for r in rows if r.get("variant") == "inductor"), None)
    print(f)
    g = lambda r, k, s="+.1%": "-" if r.get(k) is None else format(r[k], s)
    print(f'{"variant":44s} {"sync":>7s} {"uns":>7s} {"slow":>6s} {"uslow":>6s} {"outside":>7s} {"err":>6s} {"u_err":>6s} {"iter":>7s} {"asrun":>6s} {"peakerr":>7s} freed')
    for r in rows:
        if "error" in r: print(r["variant"], "ERROR", r["error"]); continue
        print(f'{r["variant"][-44:]:44s} {r["step_ms"]:7.2f} {r["unsynced_step_ms"]:7.2f} {g(r,"slowdown",".3f"):>6s} {g(r,"unsynced_slowdown",".3f"):>6s} '
              f'{g(r,"outside_ms",".2f"):>7s} {g(r,"predicted_step_error"):>6s} {g(r,"predicted_unsynced_error"):>6s} {g(r,"iteration_ms",".2f"):>7s} '
              f'{g(r,"as_run_error"):>6s} {g(r,"predicted_peak_error"):>7s} {b["peak_mib"]-r["peak_mib"] if b else 0:5.0f}')
        for c in r.get("checks") or []:
            print(f'    {c["graph"]} {c.get("replan_reason")} step {c["step_error"]:+.1%} outside {c.get("outside_ms")} as_run {c.get("step_as_run_ms")}')
