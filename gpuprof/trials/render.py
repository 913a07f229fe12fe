"""The ranked table of ``gpuprof try`` (terminal) and ``try.md``, from the try document."""

from __future__ import annotations

from typing import Any

from gpuprof.render.safe import visible

__all__ = ["table", "markdown", "html", "html_data"]


def _ms(us: Any) -> str:
    return "-" if not isinstance(us, (int, float)) else f"{us / 1000:.2f}"


def _pm(us: Any) -> str:
    return "" if not isinstance(us, (int, float)) else f" ±{us / 1000:.2f}"


def _mib(b: Any) -> str:
    return "-" if not isinstance(b, int) else f"{b / 2**20:.0f}"


def _rows(doc: dict[str, Any]) -> list[list[str]]:
    base = doc["baseline"]
    rows = [["baseline", f"{_ms(base['step_time_median_us'])}{_pm(base['interval_us'])}", "1.00x", "-", "-",
             _mib(max((r["memory_peak_bytes"] or 0 for r in base["runs"]), default=None) or None), "-",
             f"{len(base['runs'])} runs"]]
    for v in doc["variants"]:
        sp = v["speedup"]
        loss = v["loss_max_abs_diff"]
        rows.append([visible(v["name"]), f"{_ms(v['step_time_median_us'])}{_pm(v['interval_us'])}",
                     "-" if sp is None else f"{sp:.2f}x", _ms(v["measured_saving_us"]), _ms(v["predicted_saving_us"]),
                     _mib(v["memory_peak_bytes"]), "-" if loss is None else ("0" if loss == 0 else f"{loss:.2g}"),
                     v["verdict"] + (f": {visible(v['error'])}" if v["error"] else "")])
    return rows


HEAD = ["variant", "step ms (median ±noise)", "speedup", "saved ms", "predicted ms", "RSS MiB", "loss diff",
        "verdict"]


def table(doc: dict[str, Any]) -> str:
    rows = [HEAD, *_rows(doc)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
    head = (f"gpuprof try: {doc['steps']} steps after {doc['warmup']} warm-up steps per trial, "
            f"{doc['cores']} cores, {'CUDA' if doc['cuda'] else 'no CUDA'}")
    notes = [f"  {visible(v['name'])}: {visible(v['note'])}" for v in doc["variants"] if v.get("note")]
    out = [head, *_analysis_lines(doc), *lines]
    keep = [f"  {visible(v['name'])}: {visible(v['code_change'])}" for v in doc["variants"] if v.get("code_change")]
    if keep:
        out += ["to keep a faster variant, change:", *keep]
    code = _code_rows(doc)
    if code:
        out += ["needs a code change (not tried; the saving is the finding's prediction):",
                *[f"  {visible(c)}" for c in code]]
    if notes:
        out += ["notes:", *notes]
    if doc.get("interrupted"):
        out.append("interrupted: the table holds the trials measured before Ctrl-C")
    return "\n".join(out)


def _analysis_lines(doc: dict[str, Any]) -> list[str]:
    a = doc.get("analysis")
    if not a:
        return []
    lines = [f"variants from the baseline's analysis: {visible(a.get('summary') or '')}"]
    lines += [f"  {visible(n)}" for n in a.get("notes") or []]
    return lines


def _code_rows(doc: dict[str, Any]) -> list[str]:
    out = []
    for r in doc.get("needs_code_change") or []:
        pred = _ms(r.get("predicted_saving_us"))
        out.append(f"{r['code']}: {r['change']}" + (f" at {r['location']}" if r.get("location") else "")
                   + ("" if pred == "-" else f" (predicted {pred} ms per step)"))
    return out


def _md(text: str) -> str:
    return visible(text).replace("|", "\\|").replace("`", "\\`")


def markdown(doc: dict[str, Any]) -> str:
    cmd = " ".join(visible(c) for c in doc["command"]).replace("`", "'")
    out = ["# gpuprof try", "", f"Command: `{cmd}`", "",
           f"{doc['steps']} measured steps after {doc['warmup']} warm-up steps per trial; {doc['cores']} cores; "
           f"{'CUDA' if doc['cuda'] else 'no CUDA'}. Times are medians of the per-step times; ± is the noise the "
           "verdict uses (docs/try.md).", "",
           "| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(_md(c) for c in r) + " |" for r in _rows(doc)]
    keep = [f"- {_md(v['name'])}: {_md(v['code_change'])}" for v in doc["variants"] if v.get("code_change")]
    if keep:
        out += ["", "To keep a faster variant, change:", "", *keep]
    analysis = _analysis_lines(doc)
    if analysis:
        out += ["", *[_md(line.strip()) for line in analysis]]
    code = _code_rows(doc)
    if code:
        out += ["", "Needs a code change (not tried; the saving is the finding's prediction):", "",
                *[f"- {_md(c)}" for c in code]]
    notes = [f"- {_md(v['name'])}: {_md(v['note'])}" for v in doc["variants"] if v.get("note")]
    if notes:
        out += ["", "Notes:", "", *notes]
    if doc.get("interrupted"):
        out += ["", "Interrupted: the table holds the trials measured before Ctrl-C."]
    return "\n".join(out) + "\n"


def html_data(doc: dict[str, Any]) -> dict[str, Any]:
    """What the try page draws: the try document whole (every string left exact: the page shows it as text),
    its table's rows as the terminal words them, and the lines to change."""
    return {"kind": "try", "title": "gpuprof try: " + " ".join(str(c) for c in doc["command"])[:200],
            "version": doc["tool"]["version"], "try": doc, "head": HEAD,
            "rows": [[str(c) for c in r] for r in _rows(doc)],
            "keep": [[str(v["name"]), str(v["code_change"])] for v in doc["variants"] if v.get("code_change")],
            "code": _code_rows(doc), "analysis": _analysis_lines(doc)}


def html(doc: dict[str, Any]) -> str:
    """The offline, inert page of a try document (gpuprof's page: one escaped JSON document drawn with
    textContent, under a content-security policy that allows the page's own script by hash only)."""
    from gpuprof.htmlpage.page import render_page

    return render_page(html_data(doc))
