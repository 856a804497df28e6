"""Tabulates the ecosystem harness's results: one row per library, then the top causes of the
tests that pass on JAX and not on kiln, grouped by the first line of their exception."""
import collections
import re


def cause_group(cause):
    """The group of a cause line: standalone numbers become N and lists of them `[...]`, so
    'shape must be an integer, got TensorShape([2])' and '...([4, 7])' count as one cause."""
    text = re.sub(r"(?<![\w.'\"])-?\d+(\.\d+)?(?![\w.'\"])", "N", cause)
    text = re.sub(r"\[N(, N)*,?\]", "[...]", text)
    return re.sub(r"\(N(, N)*,?\)", "(...)", text)


def summarize(res):
    """Counts for one library's result dict (see harness.measure)."""
    ids = res["ids"]
    jax_ok = {i for i in ids if res["jax"].get(i, ("",))[0] == "passed"}
    kiln_ok = {i for i in ids if res["kiln"].get(i, ("",))[0] == "passed"}
    causes = collections.Counter()
    examples = {}
    for i in sorted(jax_ok - kiln_ok):
        outcome, cause = res["kiln"].get(i, ("error", "not run"))
        cause = cause_group(cause or outcome)
        causes[cause] += 1
        examples.setdefault(cause, i)
    crash = sum(1 for i in ids if res["kiln"].get(i, ("", ""))[1].startswith("crash"))
    hang = sum(1 for i in ids if res["kiln"].get(i, ("", ""))[1].startswith("hang"))
    return {"sampled": len(ids), "jax": len(jax_ok), "kiln": len(kiln_ok),
            "both": len(jax_ok & kiln_ok), "kiln_only": len(kiln_ok - jax_ok),
            "crash": crash, "hang": hang, "causes": causes, "examples": examples}


def _cell(text):
    """`text` made safe inside a Markdown table cell's code span."""
    return text.replace("|", "/").replace("`", "'")


def _pct(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _wall(res, side):
    w = res.get("wall", {}).get(side)
    return f"{w:.0f}" if w is not None else "-"


def render(results, top=10, state=""):
    """The report as Markdown: the table, then per library its causes and notes. `state` says
    which kiln was measured."""
    lines = ["# kiln on JAX's library ecosystem", "",
             f"JAX 0.10.2 against {state}." if state else "JAX 0.10.2 against kiln.", "",
             "| library | tests (sampled / collected) | pass JAX | pass kiln | pass both "
             "| kiln only | kiln/JAX | crash | hang | wall JAX s | wall kiln s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for res in results:
        name = f"{res['library']} {res['version']}"
        if not res["ids"]:
            lines.append(f"| {name} | 0 | - | - | - | - | - | - | - | - | - |")
            if res.get("note"):
                details += [f"## {name}", "", res["note"], ""]
            continue
        s = summarize(res)
        lines.append(
            f"| {name} | {s['sampled']} / {res['collected_total']} (sample {res['sample']:g}) "
            f"| {s['jax']} | {s['kiln']} | {s['both']} | {s['kiln_only']} "
            f"| {_pct(s['both'], s['jax'])} | {s['crash']} | {s['hang']} "
            f"| {_wall(res, 'jax')} | {_wall(res, 'kiln')} |")
        details += [f"## {name}", ""]
        if res.get("kiln_state"):
            details += [f"Measured against {res['kiln_state']}.", ""]
        if s["causes"]:
            details += [f"Why the {s['jax'] - s['both']} tests that pass on JAX fail on kiln "
                        f"(top {top} causes):", "", "| tests | cause | one of them |",
                        "|---|---|---|"]
            for cause, count in s["causes"].most_common(top):
                details.append(f"| {count} | `{_cell(cause)}` | `{_cell(s['examples'][cause])}` |")
            details.append("")
        errors = res.get("collect_errors") or {}
        if errors:
            details += [f"{len(errors)} test files do not collect on JAX itself "
                        "(their tests are not counted):", ""]
            details += [f"- `{path}`: {why}" for path, why in sorted(errors.items())]
            details.append("")
    return "\n".join(lines + [""] + details)
