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
            mo = c.get("measured_overhead")
            print(f'    {c["graph"]} {c.get("replan_reason")} step {c["step_error"]:+.1%} outside {c.get("outside_ms") or 0:.2f} '
                  f'plain {c.get("plain_work_ms") or 0:.2f} overhead {"-" if mo is None else format(mo, "+.1%")}')
        import statistics
        ind = [x for x in rows if x.get("variant") == "inductor" and "step_ms" in x]
        if ind and r.get("variant") != "inductor" and "step_ms" in r:
            ms = statistics.mean(x["step_ms"] for x in ind); mu = statistics.mean(x["unsynced_step_ms"] for x in ind)
            print(f'    vs mean of inductor rows: sync {r["step_ms"]/ms-1:+.1%} unsync {r["unsynced_step_ms"]/mu-1:+.1%}; offloaded {r.get("offloaded_mib")} MiB')
