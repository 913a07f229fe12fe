"""A standalone, offline, inert HTML page of a report or of a diff.

The page holds the summary, the step-time chart, the findings and the views
(sortable, searchable tables) of a report; for a diff, the per-step table,
both runs' step times, the findings fixed/new/changed and the operators and
kernels that changed. It loads nothing (no network, no file), and it is
inert whatever names the data holds, built exactly as the memory viewer
(:mod:`gpuprof.memory.htmlsafe`): the data is one escaped JSON document, the
page's one script builds the DOM with ``textContent``/``setAttribute`` of
fixed attribute names only, and the content-security policy allows that
script and stylesheet by hash and nothing else.
"""

from __future__ import annotations

import os
from typing import Any

from gpuprof.memory.htmlsafe import fill_template, page_head, script_json, text_for_html
from gpuprof.report import Report

__all__ = ["report_page_data", "diff_page_data", "render_page", "report_page", "diff_page", "PAGE_ROWS"]

PAGE_ROWS = 200  # rows per table on the page (the JSON report has up to 500 per view)


def report_page_data(report: Report) -> dict[str, Any]:
    """The numbers a report's page draws (also what tests read back from the page)."""
    d = report.to_dict()
    traces = []
    for t in d["traces"]:
        views = t.get("views") or {}
        traces.append({
            "path": t["path"],
            "devices": list(dict.fromkeys(x.get("name", "") for x in t.get("devices", []))),
            "num_steps": t["num_steps"],
            "step_time_us": t["step_time_us"],
            "step_time_mean_us": t["step_time_mean_us"],
            "gpu_utilization": t["gpu_utilization"],
            "breakdown_us": t["breakdown_us"],
            "idle_breakdown_us": t["idle_breakdown_us"],
            "step_ids": t["step_ids"],
            "step_times_us": t.get("step_times_us", []),
            "views": {k: (views.get(k) or [])[:PAGE_ROWS] for k in ("operators", "kernels", "modules", "ranges")},
            "peak_device": views.get("peak_device"),
        })
    findings = [{k: f.get(k) for k in ("code", "name", "severity", "message", "advice", "cost_us_per_step", "source")}
                | {"location": _loc(f.get("location"))} for f in d["findings"]]
    title = "gpuprof report: " + ", ".join(os.path.basename(p.rstrip("/")) for p in report.inputs)
    return {"kind": "report", "title": title, "inputs": d["inputs"], "traces": traces, "findings": findings,
            "notes": d["notes"], "version": d["tool"]["version"]}


def _loc(loc: Any) -> str | None:
    if not isinstance(loc, dict) or not loc.get("file"):
        return None
    return f"{loc['file']}:{loc['line']}" if loc.get("line") is not None else str(loc["file"])


def diff_page_data(diff: dict[str, Any]) -> dict[str, Any]:
    """The numbers a diff's page draws."""
    rows = {kind: {k: v[:PAGE_ROWS] for k, v in diff[kind].items()} for kind in ("operators", "kernels")}
    b, a = diff["before"], diff["after"]
    title = f"gpuprof diff: {os.path.basename(str(b['label']).rstrip('/'))} \u2192 {os.path.basename(str(a['label']).rstrip('/'))}"
    return {"kind": "diff", "title": title, "before": b, "after": a, "metrics": diff["metrics"], "ranks": diff["ranks"],
            "findings": diff["findings"], "regression": diff["regression"], **rows, "version": diff["tool"]["version"]}


def render_page(data: dict[str, Any]) -> str:
    """The page for ``data`` (:func:`report_page_data` or :func:`diff_page_data`): two values substituted, in one pass."""
    return fill_template(_TEMPLATE, {"TITLE": text_for_html(data["title"]), "DATA": script_json(data)})


def report_page(report: Report) -> str:
    return render_page(report_page_data(report))


def diff_page(diff: dict[str, Any]) -> str:
    return render_page(diff_page_data(diff))


# The stylesheet and the script are constants: the policy allows them by hash, and nothing else.
_STYLE = r"""
body{font:13px system-ui,sans-serif;margin:16px;color:#222;background:#fff;max-width:1400px}
h1{font-size:18px;margin:0 0 6px;overflow-wrap:anywhere} h2{font-size:15px;margin:18px 0 6px} h3{font-size:13px;margin:12px 0 4px}
.muted{color:#777;font-size:12px} .bad{color:#b00;font-weight:bold} .good{color:#070;font-weight:bold}
table{border-collapse:collapse;margin:4px 0 8px} td,th{border:1px solid #ddd;padding:2px 7px;text-align:right;vertical-align:top}
th{background:#f4f4f4;cursor:pointer;user-select:none} td.name,th.name{text-align:left;font-family:ui-monospace,monospace;
 max-width:70ch;overflow-wrap:anywhere;white-space:pre-wrap}
canvas{border:1px solid #ccc;display:block;margin:4px 0}
li{margin:4px 0;overflow-wrap:anywhere} li.error .code{color:#b00} li.warning .code{color:#a60} li.info .code{color:#555}
.code{font-weight:bold} .advice{color:#333;margin-left:1em} input{margin:4px 0;width:28em}
"""

# Data reaches the DOM only through textContent, Text nodes (append) and setAttribute of fixed attribute
# names; there is no innerHTML, insertAdjacentHTML, outerHTML or document.write in this script.
_SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const SHORT = 300, LONG = 1000;
const $ = id => document.getElementById(id);
function short(s, n = SHORT){ s = String(s === null || s === undefined ? "" : s); return s.length > n ? s.slice(0, n) + "\u2026 (" + (s.length - n) + " more characters)" : s; }
function el(tag, attrs, ...kids){ const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of kids) e.append(c instanceof Node ? c : String(c)); return e; }
function us(x){ if (x === null || x === undefined) return "-"; const a = Math.abs(x);
  return a >= 1e6 ? (x/1e6).toFixed(2) + " s" : a >= 1e3 ? (x/1e3).toFixed(a >= 1e5 ? 1 : 2) + " ms" : Math.round(x) + " \u00b5s"; }
function pct(x){ return x === null || x === undefined ? "-" : (x*100).toFixed(1) + "%"; }
function signed(x, f){ return x === null || x === undefined ? "-" : (x > 0 ? "+" : x < 0 ? "-" : "") + f(Math.abs(x)); }
function section(title){ const s = el("section", {}); s.append(el("h2", {}, title)); $("main").append(s); return s; }

// A table whose header sorts (click) and whose rows a search box filters by the name columns.
function table(parent, cols, rows, search){
  const t = el("table", {}), head = el("tr", {});
  let key = -1, dir = 1;
  cols.forEach((c, i) => { const th = el("th", {class: c.name ? "name" : ""}, c.head);
    th.addEventListener("click", () => { dir = key === i ? -dir : (c.name ? 1 : -1); key = i; draw(); }); head.append(th); });
  t.append(head);
  let filter = "";
  function draw(){
    while (t.rows.length > 1) t.deleteRow(1);
    let rs = rows.filter(r => !filter || cols.some(c => c.name && String(c.get(r)).toLowerCase().includes(filter)));
    if (key >= 0){ const g = cols[key].sort || cols[key].get; rs = rs.slice().sort((a, b) => { const x = g(a), y = g(b);
      return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir; }); }
    for (const r of rs) t.append(el("tr", {}, ...cols.map(c => el("td", {class: c.name ? "name" : ""}, c.show ? c.show(r) : short(c.get(r))))));
  }
  if (search){ const box = el("input", {type: "search", placeholder: "search names"});
    box.addEventListener("input", () => { filter = box.value.toLowerCase(); draw(); }); parent.append(box); }
  parent.append(t); draw(); return t;
}

// Step times as bars, one colour per series; every bar is one step.
function chart(parent, series){
  const cv = el("canvas", {width: "1100", height: "220"}); parent.append(cv);
  const ctx = cv.getContext("2d"), W = cv.width, H = cv.height, L = 70, B = 20, T = 10;
  const all = series.flatMap(s => s.values), max = Math.max(1, ...all), n = all.length;
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H); ctx.strokeStyle = "#999"; ctx.beginPath(); ctx.moveTo(L, T); ctx.lineTo(L, H - B); ctx.lineTo(W, H - B); ctx.stroke();
  ctx.fillStyle = "#333"; ctx.font = "11px sans-serif"; ctx.fillText(us(max), 4, T + 10); ctx.fillText("0", 4, H - B);
  const bw = Math.max(1, (W - L - 10) / Math.max(n, 1));
  let i = 0;
  for (const s of series){ ctx.fillStyle = s.color;
    for (const v of s.values){ const h = (H - B - T) * v / max; ctx.fillRect(L + 2 + i * bw, H - B - h, Math.max(1, bw - 2), h); i++; } }
  const legend = el("p", {class: "muted"}); series.forEach(s => legend.append(el("span", {}, "\u25a0 " + short(s.label) + " (" + s.values.length + " steps)  ")));
  parent.append(legend); document.body.dataset.bars = String(n);
}

function findingsList(parent, fs){
  if (!fs.length){ parent.append(el("p", {class: "muted"}, "none")); return; }
  const ul = el("ul", {}); parent.append(ul);
  for (const f of fs){ const li = el("li", {class: String(f.severity)});
    li.append(el("span", {class: "code"}, short(f.code, 40) + " " + short(f.name, 80)), " ", short(f.message, LONG));
    if (f.location) li.append(el("div", {class: "muted"}, "at " + short(f.location)));
    if (f.advice) li.append(el("div", {class: "advice"}, "Fix: " + short(f.advice, LONG)));
    ul.append(li); }
}

const VIEW_COLS = {
  operators: [{head: "operator", name: true, get: r => r.name}, {head: "input shapes", name: true, get: r => r.input_shapes || "-"},
    {head: "calls", get: r => r.calls, show: r => String(r.calls)}, {head: "CPU self", get: r => r.cpu_self_us, show: r => us(r.cpu_self_us)},
    {head: "CPU total", get: r => r.cpu_total_us, show: r => us(r.cpu_total_us)}, {head: "GPU self", get: r => r.gpu_self_us, show: r => us(r.gpu_self_us)},
    {head: "GPU total", get: r => r.gpu_total_us, show: r => us(r.gpu_total_us)}, {head: "where", name: true, get: r => (r.stacks || []).join("\n")}],
  kernels: [{head: "kernel", name: true, get: r => r.name}, {head: "calls", get: r => r.calls, show: r => String(r.calls)},
    {head: "total", get: r => r.total_us, show: r => us(r.total_us)}, {head: "mean", get: r => r.mean_us, show: r => us(r.mean_us)},
    {head: "precision", get: r => r.precision || "-"}, {head: "tensor cores", get: r => r.tensor_cores === null ? "-" : r.tensor_cores ? "yes" : "no"},
    {head: "TFLOP/s", get: r => r.tflops === null ? -1 : r.tflops, show: r => r.tflops === null ? "-" : r.tflops.toFixed(1)},
    {head: "MFU", get: r => r.mfu === null ? -1 : r.mfu, show: r => pct(r.mfu)}],
  modules: [{head: "module", name: true, get: r => r.name}, {head: "calls", get: r => r.calls, show: r => String(r.calls)},
    {head: "CPU total", get: r => r.cpu_total_us, show: r => us(r.cpu_total_us)}, {head: "GPU self", get: r => r.gpu_self_us, show: r => us(r.gpu_self_us)},
    {head: "GPU total", get: r => r.gpu_total_us, show: r => us(r.gpu_total_us)}],
};
VIEW_COLS.ranges = [{head: "range", name: true, get: r => r.name}, ...VIEW_COLS.modules.slice(1)];
const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"];

function renderReport(){
  const s = section("Summary");
  table(s, [{head: "trace", name: true, get: t => t.path}, {head: "device", name: true, get: t => t.devices.join(", ") || "-"},
    {head: "steps", get: t => t.num_steps, show: t => String(t.num_steps)}, {head: "step median", get: t => t.step_time_us, show: t => us(t.step_time_us)},
    {head: "step mean", get: t => t.step_time_mean_us, show: t => us(t.step_time_mean_us)},
    {head: "GPU utilisation", get: t => t.gpu_utilization, show: t => pct(t.gpu_utilization)}], D.traces, false);
  const keys = [...new Set(D.traces.flatMap(t => Object.keys(t.breakdown_us)))];
  table(s, [{head: "per step (mean)", name: true, get: k => k}, ...D.traces.map((t, i) => ({head: "#" + (i + 1), get: k => t.breakdown_us[k], show: k => us(t.breakdown_us[k])}))], keys, false);
  chart(section("Step time"), D.traces.map((t, i) => ({label: "#" + (i + 1) + " " + t.path, values: t.step_times_us, color: COLORS[i % COLORS.length]})));
  findingsList(section("Findings (" + D.findings.length + ")"), D.findings);
  D.traces.forEach((t, i) => { for (const v of ["operators", "kernels", "modules", "ranges"]){ if (!t.views[v].length) continue;
    const sec = section((D.traces.length > 1 ? "#" + (i + 1) + " " : "") + v + (v === "kernels" && t.peak_device ? " (MFU against " + t.peak_device + ")" : ""));
    table(sec, VIEW_COLS[v], t.views[v], true); } });
}

function renderDiff(){
  const s = section("Per step, before \u2192 after");
  const reg = D.regression; if (reg) s.append(el("p", {class: reg.regressed ? "bad" : "good"}, (reg.regressed ? "REGRESSION: " : "no regression: ") + short(reg.reason, LONG)));
  table(s, [{head: "", name: true, get: m => m.name}, {head: "before", get: m => m.before, show: m => m.unit === "fraction" ? pct(m.before) : us(m.before)},
    {head: "after", get: m => m.after, show: m => m.unit === "fraction" ? pct(m.after) : us(m.after)},
    {head: "change", get: m => m.change === null ? 0 : m.change, show: m => m.change === null ? "-" : (m.change * 100).toFixed(1) + "%"},
    {head: "noise", get: m => m.noise, show: m => m.noise === null ? "-" : m.unit === "fraction" ? pct(m.noise) : us(m.noise)}],
    D.metrics.filter(m => m.before || m.after), false);
  chart(section("Step times"), [{label: "before: " + D.before.label, values: D.before.step_times_us, color: COLORS[0]},
                                {label: "after: " + D.after.label, values: D.after.step_times_us, color: COLORS[1]}]);
  const f = section("Findings fixed (predicted vs measured saving per step)");
  table(f, [{head: "finding", name: true, get: r => r.code + " " + r.name}, {head: "where", name: true, get: r => r.location || "-"},
    {head: "predicted", get: r => r.predicted_saving_us_per_step, show: r => us(r.predicted_saving_us_per_step)},
    {head: "measured (step)", get: r => r.measured_saving_us_per_step, show: r => signed(r.measured_saving_us_per_step, us)},
    {head: "measured (part)", get: r => r.measured_part_saving_us_per_step, show: r => r.measured_part ? signed(r.measured_part_saving_us_per_step, us) + " " + r.measured_part : "-"}],
    D.findings.removed, false);
  for (const [k, title] of [["added", "Findings new"], ["changed", "Findings changed"]]){
    table(section(title), [{head: "finding", name: true, get: r => r.code + " " + r.name}, {head: "where", name: true, get: r => r.location || "-"},
      {head: "cost before", get: r => r.cost_before_us_per_step, show: r => us(r.cost_before_us_per_step)},
      {head: "cost after", get: r => r.cost_after_us_per_step, show: r => us(r.cost_after_us_per_step)},
      {head: "message", name: true, get: r => short(r.message_after || r.message_before, LONG)}], D.findings[k], false); }
  for (const kind of ["operators", "kernels"]) for (const which of ["slower", "faster", "added", "removed"]){
    const rows = D[kind][which]; if (!rows.length) continue;
    const cols = [{head: kind === "operators" ? "operator" : "kernel", name: true, get: r => r.name}];
    if (kind === "operators") cols.push({head: "input shapes", name: true, get: r => r.input_shapes || "-"});
    cols.push({head: "measured on", get: r => r.measure}, {head: "change/step", get: r => r.change_us, show: r => signed(r.change_us, us)},
              {head: "%", get: r => r.change === null ? 0 : r.change, show: r => r.change === null ? "-" : (r.change * 100).toFixed(1) + "%"});
    table(section(kind + " " + which), cols, rows, true); }
}

$("title").textContent = D.title;
$("sub").textContent = "gpuprof " + D.version + " \u00b7 offline page: nothing here loads from the network";
if (D.kind === "diff") renderDiff(); else renderReport();
document.body.dataset.rendered = "1";
"""

_TEMPLATE = (page_head(_SCRIPT, _STYLE) + """<h1 id="title"></h1><p class="muted" id="sub"></p>
<main id="main"></main>
<script id="data" type="application/json">__DATA__</script>
<script>""" + _SCRIPT + """</script></body></html>
""")
