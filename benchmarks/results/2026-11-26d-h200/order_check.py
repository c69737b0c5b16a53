"""Check Inductor's generated code: every reloaded buffer (and its aliases) is read only after its wait_reload."""
import re


def check(codes):
    out = []
    for src in codes:
        if "wait_reload" not in src:
            continue
        lines = src[src.index("def call("):].splitlines()
        owner, waited, bad, reloads = {}, set(), [], []
        for i, line in enumerate(lines):
            s = line.strip()
            if s.startswith("#") or s.startswith("del ") or s.startswith("assert_size_stride("):
                continue
            r = re.match(r"(\w+) = torch\.ops\.offload_pass\.reload\.default", s)
            if r:
                owner[r.group(1)] = r.group(1); reloads.append(r.group(1))
                continue
            w = re.search(r"offload_pass\.wait_reload\.default\((\w+)\)", s)
            if w and w.group(1) in owner:
                waited.add(owner[w.group(1)])
                continue
            a = re.match(r"(\w+) = (?:reinterpret_tensor\()?(\w+)\b", s)
            if a and a.group(2) in owner and (s == f"{a.group(1)} = {a.group(2)}" or "reinterpret_tensor(" in s.split("=", 1)[1][:20]):
                owner[a.group(1)] = owner[a.group(2)]
                if owner[a.group(2)] in waited:
                    continue
                if s.startswith(f"{a.group(1)} = {a.group(2)}") and ";" not in s:
                    continue
            for name, root in owner.items():
                if root not in waited and re.search(r"\b" + name + r"\b", s):
                    bad.append((name, root, i, s[:170]))
                    break
        out.append((len(reloads), [r for r in reloads if r not in waited], bad))
    return out
