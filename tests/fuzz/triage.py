"""Grouping saved regressions (regressions/*.json) into a defect list: one entry per (class, op)
with its transformations, dtypes and count, the smallest repro among them, and JAX's and kiln's
answers. `python3 -m tests.fuzz --triage` prints it; TRIAGE.md starts from it."""
import collections
import glob
import json
import os
import re

from .campaign import REGRESSIONS, from_json
from .compare import CLASSES
from .program import compact_repro


def load(directory=REGRESSIONS):
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        with open(path) as f:
            out.append(json.load(f))
    return out


def _size(obj):
    prog = from_json(obj)
    return sum(v.size for v in prog.inputs.values()) + 10 * len(prog.stmts)


def _one_line(s, n=220):
    s = re.sub(r"\s+", " ", s or "")
    return s[:n] + ("..." if len(s) > n else "")


def groups(objs):
    by = collections.defaultdict(list)
    for o in objs:
        by[(o["class"], o["signature"][0])].append(o)
    out = []
    for (cls, op), members in by.items():
        rep = min(members, key=lambda o: (_size(o), o["transform"] != "eager", o["transform"] != "jit"))
        out.append({
            "cls": cls, "op": op, "members": members, "rep": rep,
            "count": sum(o.get("count", 1) for o in members),
            "transforms": sorted({o["transform"] for o in members}),
            "dtypes": sorted({o["signature"][2] for o in members}),
        })
    out.sort(key=lambda g: (CLASSES.index(g["cls"]), -g["count"], g["op"]))
    return out


def markdown(objs, heading="###"):
    lines = []
    for g in groups(objs):
        rep = g["rep"]
        prog = from_json(rep)
        lines += [f"{heading} {g['cls']}: `{g['op']}` ({g['count']} failing checks, {len(g['members'])} signatures)", "",
                  f"transformations: {', '.join(g['transforms'])}; dtypes: {'; '.join(g['dtypes'])}", ""]
        if rep.get("detail"):
            lines += [_one_line(rep["detail"], 300), ""]
        lines += [f"```python  # {rep['transform']}, seed {rep['seed']}", compact_repro(prog, rep["transform"]), "```", "",
                  f"- JAX: `{_one_line(rep['jax'])}`", f"- kiln: `{_one_line(rep['kiln'])}`", ""]
    return "\n".join(lines)
