"""Paired table: per variant freed MiB, paired sync/unsync slowdown (median, min..max over blocks), in-call checks,
round-robin against the mean of plain rows; then how the reference blocks settle after each variant."""
import json, sys, statistics as st
for f in sys.argv[1:]:
    d = json.load(open(f)); rows = d["results"]
    ok = [r for r in rows if "error" not in r]
    ref = ok[0]
    ind = [r for r in ok if r["variant"] == "inductor"]
    ms = st.mean(r["step_ms"] for r in ind); mu = st.mean(r["unsynced_step_ms"] for r in ind)
    print(f, d.get("device"))
    print(f'{"variant":42s} {"freed":>5s} {"pair":>6s} {"range":>13s} {"upair":>6s} {"urange":>13s} {"rr":>6s} {"urr":>6s}  in-call')
    for r in ok:
        if r is ref: continue
        pr = r.get("paired_rounds") or [0]; ur = r.get("paired_unsynced_rounds") or [0]
        ch = [c.get("measured_overhead") for c in r.get("checks") or []]
        print(f'{r["variant"][-42:]:42s} {ref["peak_mib"]-r["peak_mib"]:5.0f} {100*(r.get("paired_slowdown",1)-1):+6.1f} '
              f'{100*(min(pr)-1):+6.1f}..{100*(max(pr)-1):+5.1f} {100*(r.get("paired_unsynced_slowdown",1)-1):+6.1f} '
              f'{100*(min(ur)-1):+6.1f}..{100*(max(ur)-1):+5.1f} {100*(r["step_ms"]/ms-1):+6.1f} {100*(r["unsynced_step_ms"]/mu-1):+6.1f}  '
              + " ".join("-" if m is None else f"{100*m:+.1f}" for m in ch)
              + ("  FALLBACK" if any(c.get("fallback") for c in r.get("checks") or []) else ""))
    blocks = ref.get("paired_blocks") or []
    names = {i: r["variant"][-30:] for i, r in enumerate([r for r in ok])}
    print("reference blocks after each variant: settle steps 1-3, settle mean, timed median (ms)")
    after = {}
    for prev, b in zip(blocks, blocks[1:]):
        if b["variant"] == 0:
            after.setdefault(prev["variant"], []).append(b)
    for v, bs in sorted(after.items()):
        s = [st.mean(b["settle_ms"][i] for b in bs) for i in range(min(3, len(bs[0]["settle_ms"])))]
        print(f'  after {names.get(v, v):30s} {" ".join(f"{x:6.2f}" for x in s)}  {st.mean(st.mean(b["settle_ms"]) for b in bs):6.2f}  {st.mean(st.median(b["sync_ms"]) for b in bs):6.2f}')
