"""The history as one standalone, offline HTML page: a chart per figure (inline SVG) and the runs' table.

The page has no script at all: every value is drawn by this module into SVG
and table cells, each text escaped (:func:`gpuprof.memory.htmlsafe.text_for_html`),
and the content-security policy allows its one inline stylesheet by hash and
nothing else (no script, no fetch), so a run named ``<script>`` is text.
"""

from __future__ import annotations

from typing import Any

from gpuprof.history.render import fmt_metric
from gpuprof.history.runs import METRICS
from gpuprof.memory.htmlsafe import csp_hash, text_for_html

__all__ = ["history_page"]

_STYLE = ("body{font:13px system-ui,sans-serif;margin:16px;color:#222;max-width:1200px}"
          "h1{font-size:18px}h2{font-size:15px;margin:16px 0 4px}table{border-collapse:collapse}"
          "td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}td:first-child,th:first-child"
          "{text-align:left;overflow-wrap:anywhere}.cp{color:#b00;font-weight:bold}")
_W, _H, _PAD = 720, 140, 24


def _policy() -> str:
    return "; ".join(["default-src 'none'", "script-src 'none'", f"style-src {csp_hash(_STYLE)}", "img-src 'none'",
                      "base-uri 'none'", "form-action 'none'", "object-src 'none'"])


def _fmt(metric: str, v: Any) -> str:
    return fmt_metric(metric, v if isinstance(v, (int, float)) else None)


def _chart(metric: str, runs: list[dict[str, Any]], marked: set[str]) -> str:
    pts = [(i, r[metric]) for i, r in enumerate(runs) if isinstance(r.get(metric), (int, float))]
    if not pts:
        return "<p>not in the reports</p>"
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    span = (hi - lo) or 1.0
    n = max(len(runs) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return _PAD + (_W - 2 * _PAD) * i / n, _H - _PAD - (_H - 2 * _PAD) * (v - lo) / span

    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in pts))
    dots = []
    for i, v in pts:
        x, y = xy(i, v)
        name = str(runs[i]["name"])
        cp = name in marked
        label = text_for_html(f"{name}: {_fmt(metric, v)}" + (" (change point)" if cp else ""))
        dots.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{5 if cp else 3}" fill="{"#b00" if cp else "#36c"}">'
                    f"<title>{label}</title></circle>")
    axis = (f'<text x="2" y="{_PAD - 8}" font-size="11">{text_for_html(_fmt(metric, hi))}</text>'
            f'<text x="2" y="{_H - 4}" font-size="11">{text_for_html(_fmt(metric, lo))}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img">{axis}'
            f'<polyline points="{line}" fill="none" stroke="#36c" stroke-width="1.5"/>{"".join(dots)}</svg>')


def history_page(doc: dict[str, Any]) -> str:
    """The page of a history document (:func:`gpuprof.history.render.history_dict`)."""
    runs: list[dict[str, Any]] = doc["runs"]
    points: list[dict[str, Any]] = doc["change_points"]
    out = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{_policy()}">',
           f"<title>gpuprof history: {text_for_html(str(doc['root']))}</title>",
           f"<style>{_STYLE}</style></head><body>",
           f"<h1>gpuprof history: {len(runs)} runs under {text_for_html(str(doc['root']))}</h1>"]
    for metric, (label, _) in METRICS.items():
        marked = {str(p["run"]) for p in points if p["metric"] == metric}
        out.append(f"<h2>{text_for_html(label)}</h2>{_chart(metric, runs, marked)}")
    out.append("<h2>Change points</h2><ul>")
    out += [f'<li class="cp">{text_for_html(str(p["run"]))}: {text_for_html(METRICS[p["metric"]][0])} '
            f'{text_for_html(_fmt(p["metric"], p["before"]))} &#8594; {text_for_html(_fmt(p["metric"], p["after"]))}</li>'
            for p in points] or ["<li>none: every figure moved within its runs' noise</li>"]
    out.append("</ul><h2>Findings</h2><ul>")
    out += [f"<li>{text_for_html(str(c['code']))} {text_for_html(str(c['change']))} in {text_for_html(str(c['run']))}</li>"
            for c in doc["finding_changes"]] or ["<li>none</li>"]
    out.append("</ul><h2>Runs (oldest first)</h2><table><tr><th>run</th>")
    out += [f"<th>{text_for_html(label)}</th>" for label, _ in METRICS.values()]
    out.append("<th>findings</th></tr>")
    cps = {(str(p["run"]), p["metric"]) for p in points}
    for r in runs:
        cells = "".join(f'<td{" class=cp" if (str(r["name"]), m) in cps else ""}>{text_for_html(_fmt(m, r.get(m)))}</td>'
                        for m in METRICS)
        codes = ", ".join(str(c) for c in r.get("findings", []))
        out.append(f"<tr><td>{text_for_html(str(r['name']))}</td>{cells}<td>{text_for_html(codes or '-')}</td></tr>")
    out.append("</table></body></html>\n")
    return "\n".join(out)
