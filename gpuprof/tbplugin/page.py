"""The dashboard page: one HTML document whose inline script and stylesheet are allowed by hash, nothing else.

It follows the memory viewer's rules (:mod:`gpuprof.memory.htmlsafe`): the
data arrives as JSON (``fetch`` of the plugin's relative routes, parsed with
``JSON.parse``) and reaches the DOM only through ``textContent``, Text nodes
and ``setAttribute`` of fixed attribute names; charts are SVG elements built
with ``createElementNS``. The policy allows exactly this script and this
stylesheet, fetches from the page's own server (``connect-src 'self'``,
``frame-src 'self'`` for the memory viewer) and nothing else; Trusted Types
make any string assigned to ``innerHTML`` fail. No font, image or script
comes from elsewhere: the page uses the system fonts.

The page never builds an absolute URL: ``runs``, ``run?run=...`` resolve
against ``.../data/plugin/gpuprof/index.html``, so TensorBoard's
``--path_prefix`` needs nothing from us.
"""

from __future__ import annotations

from gpuprof.memory.htmlsafe import csp_hash, page_policy

__all__ = ["ENTRY_MODULE", "INDEX_HTML", "POLICY", "HEADER_POLICY", "SCRIPT_HASHES"]

# TensorBoard imports this module in its plugin frame (base href data/plugin/gpuprof/) and calls render():
# the frame moves on to our page, which then owns the whole frame and its policy.
ENTRY_MODULE = 'export async function render() { document.location.href = "index.html"; }\n'

_STYLE = r"""
body{font:13px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#212121;background:#f5f5f5}
header{background:#fff;border-bottom:1px solid #ddd;padding:10px 16px;display:flex;flex-wrap:wrap;gap:12px;align-items:center;position:sticky;top:0;z-index:2}
header b{font-size:15px} select{max-width:420px;font:inherit}
main{padding:8px 16px 40px} section{background:#fff;border:1px solid #e0e0e0;border-radius:4px;margin:12px 0;padding:10px 14px}
h2{font-size:14px;margin:0 0 8px} .muted{color:#777} .straggler{color:#e37400;font-weight:600} .err{color:#b00020;overflow-wrap:anywhere}
#cards{display:flex;flex-wrap:wrap;gap:10px} .card{border:1px solid #e0e0e0;border-radius:4px;padding:6px 10px;min-width:120px}
.card .k{color:#777;font-size:11px} .card .v{font-size:16px;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;margin-top:4px} td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:right;vertical-align:top}
th{color:#555;font-weight:600} td.name,th.name{text-align:left;font-family:ui-monospace,Menlo,monospace;overflow-wrap:anywhere;word-break:break-word;max-width:70ch}
.finding{border-left:4px solid #999;padding:6px 10px;margin:8px 0;background:#fafafa}
.finding.error{border-color:#b00020} .finding.warning{border-color:#e37400} .finding.info{border-color:#1a73e8}
.finding .head{font-weight:600;overflow-wrap:anywhere} .finding .msg,.finding .fix{overflow-wrap:anywhere;margin-top:3px;white-space:pre-wrap}
.finding .meta{color:#555;font-size:12px;margin-top:3px;overflow-wrap:anywhere} .tag{display:inline-block;border:1px solid #ccc;border-radius:3px;padding:0 4px;font-size:11px;margin-left:6px;font-weight:400}
.legend span{display:inline-block;margin:2px 12px 2px 0} .legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
svg text{font:11px system-ui,sans-serif;fill:#444} .chart{overflow-x:auto}
iframe{width:100%;height:760px;border:1px solid #ddd;background:#fff}
.worse{color:#b00020} .better{color:#188038} ul{margin:4px 0;padding-left:20px} li{overflow-wrap:anywhere}
"""

_SCRIPT = r"""
"use strict";
const SHORT = 300, LONG = 2000;
const BD_COLORS = {kernel: "#1a73e8", communication: "#9334e6", memcpy: "#e8710a", memset: "#f9ab00", runtime: "#d93025",
  data_loading: "#188038", cpu_exec: "#80868b", other: "#dadce0"};
const IDLE_COLORS = {sync: "#d93025", blocking_copy: "#e8710a", runtime: "#f9ab00", data_loading: "#188038",
  optimizer: "#9334e6", cpu_other: "#80868b"};
const SVGNS = "http://www.w3.org/2000/svg";
const state = {runs: [], run: null, view: null, trace: 0, compare: "", seq: 0, memSeq: 0};

function short(s, n = SHORT){ s = String(s); return s.length > n ? s.slice(0, n) + "\u2026 (" + (s.length - n) + " more characters)" : s; }
function el(tag, attrs, ...kids){ const e = document.createElement(tag);
  for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
  e.append(...kids.filter(k => k !== null && k !== undefined)); return e; }
function svg(tag, attrs, ...kids){ const e = document.createElementNS(SVGNS, tag);
  for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
  e.append(...kids); return e; }
function num(x){ return typeof x === "number" && isFinite(x); }
function fmtUs(us){ if (!num(us)) return "-"; const a = Math.abs(us);
  if (a >= 1e6) return (us / 1e6).toFixed(2) + " s"; if (a >= 1e3) return (us / 1e3).toFixed(a >= 1e5 ? 0 : 2) + " ms";
  return us.toFixed(a >= 100 ? 0 : 1) + " \u00b5s"; }
function fmtPct(x){ return num(x) ? (100 * x).toFixed(1) + "%" : "-"; }
function fmtB(n){ if (!num(n)) return "-"; const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0, v = Math.abs(n);
  while (v >= 1024 && i < u.length - 1){ v /= 1024; i++; } return (n < 0 ? "-" : "") + (i ? v.toFixed(2) : Math.round(v)) + " " + u[i]; }
function sev(s){ return ["error", "warning", "info"].includes(s) ? s : "info"; }
function $(id){ return document.getElementById(id); }
function setStatus(text, isError){ const s = $("status"); s.textContent = text; s.className = isError ? "err" : "muted"; }
async function getJSON(url){ const r = await fetch(url, {credentials: "same-origin"}); const j = await r.json();
  if (!r.ok && j.status !== "missing") throw new Error("HTTP " + r.status); return j; }
function q(route, params){ return route + "?" + new URLSearchParams(params).toString(); }
function bump(){ document.body.dataset.rendered = String((+document.body.dataset.rendered || 0) + 1); }

function table(id, head, rows){
  const t = $(id); const tr = el("tr", {}, ...head.map((h, i) => el("th", i === 0 ? {class: "name"} : {}, h)));
  t.replaceChildren(tr, ...rows.map(r => el("tr", {}, ...r.map((c, i) => el("td", i === 0 ? {class: "name"} : {}, c)))));
  t.parentElement.hidden = rows.length === 0;
}
function legend(keys, colors){ return el("div", {class: "legend"}, ...keys.map(k => { const i = el("i"); i.style.background = colors[k]; return el("span", {}, i, k); })); }

// Stacked bars, one per step: each bar is the step's parts, bottom to top in the metric's order.
function stackedChart(box, steps, field, colors, title){
  const keys = Object.keys(colors), W = Math.max(520, Math.min(1200, 60 + steps.length * 26)), H = 220;
  const M = {l: 64, r: 10, t: 10, b: 34};
  const totals = steps.map(s => keys.reduce((a, k) => a + (s[field][k] || 0), 0));
  const ymax = Math.max(1, ...totals) * 1.05, bw = (W - M.l - M.r) / Math.max(steps.length, 1);
  const Y = v => H - M.b - v / ymax * (H - M.t - M.b);
  const g = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title});
  for (let k = 0; k <= 4; k++){ const v = ymax * k / 4;
    g.append(svg("line", {x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), stroke: "#eee"}),
             svg("text", {x: M.l - 6, y: Y(v) + 4, "text-anchor": "end"}, fmtUs(v))); }
  steps.forEach((s, i) => {
    let base = 0; const x = M.l + i * bw + bw * 0.15, w = Math.max(1, bw * 0.7);
    for (const k of keys){ const v = s[field][k] || 0; if (v <= 0) continue;
      const r = svg("rect", {class: "bar", x: x, y: Y(base + v), width: w, height: Math.max(0.5, Y(base) - Y(base + v)), fill: colors[k]});
      r.append(svg("title", {}, "step " + s.id + " \u00b7 " + k + ": " + fmtUs(v) + " (" + fmtPct(v / (totals[i] || 1)) + ")"));
      g.append(r); base += v; }
    if (steps.length <= 40 || i % Math.ceil(steps.length / 40) === 0)
      g.append(svg("text", {x: x + w / 2, y: H - M.b + 14, "text-anchor": "middle"}, String(s.id)));
  });
  g.append(svg("text", {x: (M.l + W - M.r) / 2, y: H - 4, "text-anchor": "middle"}, "step"));
  box.replaceChildren(legend(keys, colors), el("div", {class: "chart"}, g));
}

function card(k, v){ return el("div", {class: "card"}, el("div", {class: "k"}, k), el("div", {class: "v"}, v)); }

function showSummary(v){
  const h = v.headline;
  const cards = [card("devices", h.devices.length ? h.devices.map(d => short(d)).join(", ") : "no GPU in the trace"),
    card("steps analysed", String(h.steps)), card("median step", fmtUs(h.step_time_us)), card("mean step", fmtUs(h.step_time_mean_us)),
    card("GPU utilisation", h.gpu_utilization === null ? "n/a (no GPU activity)" : fmtPct(h.gpu_utilization)),
    card("traces", String(h.traces)), card("findings", String(v.findings.length))];
  if (v.capture) cards.push(card("capture: steps run", String(v.capture.steps)),
                            card("capture: data loading", fmtPct(v.capture.data_loading_share)));
  $("cards").replaceChildren(...cards);
  const errs = v.errors.map(e => el("li", {}, short(e, LONG)));
  if (v.failed_rules.length) errs.unshift(el("li", {}, "rules that failed (a gpuprof bug; their findings are unknown, the analysis is incomplete): " + v.failed_rules.join(", ")));
  $("errors").replaceChildren(...errs); $("errors").hidden = errs.length === 0;
}

function evidenceRows(f){
  return (f.evidence || []).map(e => el("tr", {}, el("td", {class: "name"}, short(e.metric)),
    el("td", {}, e.unit === "us" ? fmtUs(e.value) : e.unit === "fraction" ? fmtPct(e.value) : e.unit === "bytes" ? fmtB(e.value) : short(String(e.value)) + (e.unit ? " " + short(e.unit) : "")),
    el("td", {}, e.threshold === null || e.threshold === undefined ? "" : "threshold " + (e.unit === "us" ? fmtUs(e.threshold) : e.unit === "fraction" ? fmtPct(e.threshold) : e.unit === "bytes" ? fmtB(e.threshold) : String(e.threshold))),
    el("td", {}, (e.events || []).length ? (e.events.length + " events, e.g. " + short(e.events[0].name, 120)) : "")));
}

function showFindings(v){
  const items = v.findings.map(f => {
    const loc = f.location ? short(f.location.file) + (f.location.line ? ":" + f.location.line : "") + (f.location.function ? " (" + short(f.location.function) + ")" : "") : null;
    const cost = "cost " + short(f.display_cost || "not estimated");
    const from = f.scope === "cross-rank" ? "cross-rank analysis" : f.origin === "trace" ? "trace analysis" + (f.trace ? " of " + short(f.trace) : "") : short(f.origin || "?") + " (from " + short(f.report || "report.json") + ")";
    const ev = evidenceRows(f);
    return el("div", {class: "finding " + sev(f.severity), "data-code": short(f.code, 40)},
      el("div", {class: "head"}, short(f.code, 40) + " " + short(f.name || ""), el("span", {class: "tag"}, sev(f.severity)), el("span", {class: "tag"}, from)),
      el("div", {class: "msg"}, short(f.display_message || f.message, LONG)),
      el("div", {class: "meta"}, cost + (loc ? " \u00b7 at " + loc : "")),
      f.advice ? el("div", {class: "fix"}, "Fix: " + short(f.advice, LONG)) : null,
      ev.length ? el("table", {}, ...ev) : null);
  });
  $("findings").replaceChildren(...(items.length ? items : [el("p", {class: "muted"}, v.failed_rules.length ? "No findings from the rules that ran (some failed: see above)." : "No findings.")]));
}

function showTrace(v){
  const sel = $("trace");
  sel.replaceChildren(...v.traces.map((t, i) => el("option", {value: i}, short(t.file) + (t.summary.rank !== null && t.summary.rank !== undefined ? " (rank " + t.summary.rank + ")" : ""))));
  sel.parentElement.hidden = v.traces.length < 2;
  state.trace = Math.min(state.trace, Math.max(v.traces.length - 1, 0)); sel.value = String(state.trace);
  const t = v.traces[state.trace];
  if (!t){ for (const id of ["steps-chart", "idle-chart"]) $(id).replaceChildren(el("p", {class: "muted"}, "No trace analysed in this run.")); return; }
  const s = t.summary;
  stackedChart($("steps-chart"), t.steps, "breakdown_us", BD_COLORS, "step time per step");
  if (s.has_gpu_activity) stackedChart($("idle-chart"), t.steps, "idle_us", IDLE_COLORS, "GPU idle time per step");
  else $("idle-chart").replaceChildren(el("p", {class: "muted"}, "This trace has no GPU activity (a CPU run), so there is no GPU idle time to break down."));
  table("kernels", ["kernel", "launches", "total", "mean", "share of GPU"], s.top_kernels.map(k => [short(k.name), String(k.count), fmtUs(k.total_us), fmtUs(k.mean_us), fmtPct(k.share_of_gpu)]));
  table("ops", ["operator", "calls", "host total", "host self", "GPU self", "GPU total"], s.top_ops.map(o => [short(o.name), String(o.count), fmtUs(o.total_us), fmtUs(o.self_us), fmtUs(o.gpu_us), fmtUs(o.gpu_total_us)]));
  table("copies", ["direction", "memory", "count", "bytes", "GPU time", "bandwidth"], s.copies.map(c => [short(c.direction), short(c.memory), String(c.count), fmtB(c.bytes), fmtUs(c.total_us), num(c.bandwidth_gbps) ? c.bandwidth_gbps.toFixed(1) + " GB/s" : "-"]));
  table("syncs", ["cause", "runtime call", "count", "blocked", "where"], s.syncs.map(x => [short(x.cause), short(x.runtime), String(x.count), fmtUs(x.total_us), x.location ? short(x.location) : "-"]));
  $("no-gpu-tables").hidden = s.top_kernels.length + s.copies.length + s.syncs.length > 0;
}

// With a cross-rank section the rows carry its numbers (gpuprof.tbplugin.data._ranks): the wait in collectives
// and the straggler, never "vs fastest", which names the rank that waits as the slow one.
function showRanks(v){
  const cross = v.ranks.some(r => "wait_us" in r);
  table("ranks", ["rank", "traces", "steps", "median step", cross ? "waits for others / step" : "vs fastest", "GPU utilisation", "GPU idle / step", "findings", "report"],
    v.ranks.map(r => [String(r.rank) + (r.straggler ? " (straggler)" : ""), String(r.traces), String(r.steps), fmtUs(r.step_time_us),
                      cross ? fmtUs(r.wait_us) : num(r.vs_fastest) ? "+" + fmtPct(r.vs_fastest) : "-",
                      fmtPct(r.gpu_utilization), fmtUs(r.idle_us), String(r.findings), r.report ? short(r.report) : "-"]));
}

// The cross_rank section of gpuprof.distributed (docs/distributed.md): the same numbers as `gpuprof analyze RANKS...`.
function straggler(x){
  if (!x.stragglers.length) return "no straggler: the ranks wait about as long as each other in the collectives";
  return "straggler: rank " + x.stragglers.join(", ") + " (the others wait " + fmtUs(x.others_wait_us) + " per step for it" +
    (x.straggler_cause ? "; its excess: " + short(x.straggler_cause) + " +" + fmtUs(x.straggler_excess_us) + ")" : ")");
}
function showCrossRank(v){
  const x = v.cross_rank; $("crossrank").hidden = !x;
  if (!x) return;
  $("xhead").textContent = x.ranks.length + " ranks" + (num(x.world_size) ? " of " + x.world_size : "") + ", backend " +
    (x.backend ? short(x.backend, 40) : "unknown") + ", median step " + fmtUs(x.step_us);
  $("xstraggler").textContent = straggler(x);
  $("xstraggler").className = x.stragglers.length ? "straggler" : "muted";
  const slow = new Set(x.stragglers);
  table("xranks", ["rank", "step", "compute", "comm", "exposed comm", "wait", "data loading", "host", "sync", "unrecorded", "collectives / step", "device"],
    x.ranks.map(r => [String(r.rank) + (slow.has(r.rank) ? " (straggler)" : ""), fmtUs(r.step_us), fmtUs(r.compute_us), fmtUs(r.comm_us),
                      fmtUs(r.exposed_comm_us), fmtUs(r.wait_us), fmtUs(r.data_loading_us), fmtUs(r.host_us), fmtUs(r.sync_us),
                      fmtUs(r.unrecorded_us), num(r.collectives_per_step) ? r.collectives_per_step.toFixed(1) : "-", short(r.device || "", 60)]));
  table("xcolls", ["collective", "per step", "mean time", "mean size", "bytes / step", "bus bandwidth"],
    x.collectives.map(c => [short(c.type, 40), num(c.per_step) ? c.per_step.toFixed(1) : "-", fmtUs(c.mean_us), fmtB(c.mean_bytes),
                            fmtB(c.bytes_per_step), num(c.bus_gbps) ? c.bus_gbps.toFixed(1) + " GB/s" : "-"]));
  $("xnotes").replaceChildren(...x.notes.map(n => el("li", {}, short(n, LONG))));
}

function showMemory(v){
  const sel = $("snap"); $("memory").hidden = v.snapshots.length === 0;
  sel.replaceChildren(...v.snapshots.map((s, i) => el("option", {value: i}, short(s))));
  $("memframe").replaceChildren(); $("memstatus").textContent = ""; state.memSeq++;
}
async function openMemory(){
  const i = $("snap").value, run = state.run, seq = ++state.memSeq;
  $("memstatus").textContent = "analysing the snapshot\u2026";
  for (;;){
    let j; try { j = await getJSON(q("memory", {run, i})); } catch (e) { $("memstatus").textContent = "could not load the snapshot: " + e.message; return; }
    if (seq !== state.memSeq || run !== state.run) return;
    if (j.status === "pending"){ await new Promise(r => setTimeout(r, 500)); continue; }
    if (j.status !== "ready"){ $("memstatus").textContent = short(j.error || j.status, LONG); return; }
    // sandbox: the viewer runs its own (hash-allowed) script in an opaque origin, with no access to this page
    const f = el("iframe", {sandbox: "allow-scripts", title: "memory timeline", src: q("memory.html", {run, i})});
    $("memframe").replaceChildren(f); $("memstatus").textContent = ""; return;
  }
}

function showNotes(v){ $("notes").replaceChildren(...v.notes.map(n => el("li", {}, short(n, LONG)))); $("notes").parentElement.hidden = v.notes.length === 0; }

function render(v){
  state.view = v;
  showSummary(v); showFindings(v); showTrace(v); showRanks(v); showCrossRank(v); showMemory(v); showNotes(v);
  $("content").hidden = false; bump();
}

async function loadRun(name){
  state.run = name; const seq = ++state.seq; $("content").hidden = true;
  for (;;){
    let j; try { j = await getJSON(q("run", {run: name})); } catch (e) { setStatus("could not load the run: " + e.message, true); return; }
    if (seq !== state.seq) return;
    if (j.status === "pending"){ setStatus("analysing " + short(name) + ": " + j.done + " of " + j.total + " traces done\u2026"); await new Promise(r => setTimeout(r, 500)); continue; }
    if (j.status !== "ready"){ setStatus(short(j.error || j.status, LONG), true); return; }
    setStatus(""); render(j.view); if (state.compare) loadCompare(); return;
  }
}

// Times: the relative change, red when it grew. A share (utilisation): the change in points, green when it grew.
function cmpRow(label, b, a, fmt, share){
  const ch = !num(b) || !num(a) ? null : share ? a - b : b !== 0 ? a / b - 1 : null;
  const better = ch === null || Math.abs(ch) <= 0.005 ? "" : (ch < 0) !== !!share ? "better" : "worse";
  const text = ch === null ? "-" : (ch > 0 ? "+" : "") + (share ? (100 * ch).toFixed(1) + " points" : fmtPct(ch));
  return el("tr", {}, el("td", {class: "name"}, label), el("td", {}, fmt(b)), el("td", {}, fmt(a)), el("td", better ? {class: better} : {}, text));
}
function findingList(title, list){
  return el("div", {}, el("h3", {}, title + " (" + list.length + ")"),
    list.length ? el("ul", {}, ...list.map(f => el("li", {class: sev(f.severity)}, short(f.code, 40) + " " + short(f.message, LONG)))) : el("p", {class: "muted"}, "none"));
}
async function loadCompare(){
  const other = state.compare, box = $("compare-body"); if (!other){ box.replaceChildren(); return; }
  const seq = state.seq;
  for (;;){
    let j; try { j = await getJSON(q("compare", {a: other, b: state.run})); }
    catch (e) { box.replaceChildren(el("p", {class: "err"}, "could not compare: " + e.message)); return; }
    if (seq !== state.seq || other !== state.compare) return;
    if (j.status === "pending"){ box.replaceChildren(el("p", {class: "muted"}, "analysing\u2026 " + j.done + " of " + j.total + " traces")); await new Promise(r => setTimeout(r, 500)); continue; }
    if (j.status !== "ready"){ box.replaceChildren(el("p", {class: "err"}, short(j.error || j.status, LONG))); return; }
    const c = j.compare;
    const rows = [cmpRow("median step", c.step_time_us.before, c.step_time_us.after, fmtUs), cmpRow("mean step", c.step_time_mean_us.before, c.step_time_mean_us.after, fmtUs),
      cmpRow("GPU utilisation", c.gpu_utilization.before, c.gpu_utilization.after, fmtPct, true)];
    for (const k of Object.keys(c.breakdown_us)) rows.push(cmpRow("step: " + k, c.breakdown_us[k].before, c.breakdown_us[k].after, fmtUs));
    for (const k of Object.keys(c.idle_us)) if (c.idle_us[k].before || c.idle_us[k].after) rows.push(cmpRow("GPU idle: " + k, c.idle_us[k].before, c.idle_us[k].after, fmtUs));
    box.replaceChildren(el("p", {}, "before: " + short(c.before) + " \u2192 after: " + short(c.after) + " (this run)"),
      el("table", {id: "compare-table"}, el("tr", {}, el("th", {class: "name"}, "per step (means)"), el("th", {}, "before"), el("th", {}, "after"), el("th", {}, "change")), ...rows),
      findingList("findings removed", c.removed), findingList("findings added", c.added),
      findingList("findings in both", c.kept.map(k => k.after)));
    bump(); return;
  }
}

async function init(){
  let j; try { j = await getJSON("runs"); } catch (e) { setStatus("could not list the runs: " + e.message, true); return; }
  state.runs = j.runs;
  const sel = $("run"), cmp = $("cmp");
  sel.replaceChildren(...j.runs.map(r => el("option", {value: r.name}, short(r.name) + (r.capture ? " (capture)" : ""))));
  cmp.replaceChildren(el("option", {value: ""}, "(none)"), ...j.runs.map(r => el("option", {value: r.name}, short(r.name))));
  $("lognotes").replaceChildren(...j.notes.map(n => el("li", {}, short(n, LONG))));
  if (!j.runs.length){ setStatus("No runs under the logdir: point tensorboard --logdir at a gpuprof capture logdir or a folder of traces."); bump(); return; }
  sel.addEventListener("change", () => { state.trace = 0; loadRun(sel.value); });
  cmp.addEventListener("change", () => { state.compare = cmp.value; loadCompare(); });
  $("trace").addEventListener("change", () => { state.trace = +$("trace").value; showTrace(state.view); bump(); });
  $("snapopen").addEventListener("click", openMemory);
  loadRun(j.runs[0].name);
}
init();
"""

SCRIPT_HASHES = [csp_hash(_SCRIPT)]
POLICY = page_policy([_SCRIPT], [_STYLE], connect="'self'", frames="'self'")
# The same policy as an HTTP header, less the Trusted Types directives: TensorBoard's response validator
# (tensorboard/backend/security_validator.py) accepts only 'self', 'none', https: and hashes as values and
# warns ("will become an error in 3.0") about require-trusted-types-for 'script'. The page's <meta> policy
# carries them; a browser enforces both policies, so the page gets all of it.
HEADER_POLICY = "; ".join(d for d in POLICY.split("; ") if not d.startswith(("require-trusted-types-for", "trusted-types")))

INDEX_HTML = ("""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content=\"""" + POLICY + """\">
<meta name="referrer" content="no-referrer">
<title>gpuprof</title>
<style>""" + _STYLE + """</style></head><body>
<header><b>gpuprof</b>
<label>Run <select id="run"></select></label>
<label>Compare with (before) <select id="cmp"></select></label>
<span id="status" class="muted">loading\u2026</span></header>
<main>
<ul id="lognotes" class="muted"></ul>
<div id="content" hidden>
<section><h2>Summary</h2><div id="cards"></div><ul id="errors" class="err" hidden></ul></section>
<section id="compare"><h2>Comparison</h2><div id="compare-body"><p class="muted">Pick a run in "Compare with" to see this run against it: step time, breakdowns, findings added and removed.</p></div></section>
<section><h2>Findings</h2><div id="findings"></div></section>
<section><label hidden>Trace <select id="trace"></select></label>
<h2>Step time per step</h2><p class="muted">Each step's time split by what was happening, first match wins (docs/report-schema.md, breakdown_us).</p><div id="steps-chart"></div>
<h2>GPU idle time per step</h2><p class="muted">While the main GPU was idle, what the main thread was doing.</p><div id="idle-chart"></div></section>
<section><h2>Top operators</h2><table id="ops"></table></section>
<section><h2>Top kernels</h2><table id="kernels"></table></section>
<section><h2>Copies</h2><table id="copies"></table></section>
<section><h2>Host syncs</h2><table id="syncs"></table></section>
<p id="no-gpu-tables" class="muted" hidden>No kernels, copies or host syncs in this trace.</p>
<section><h2>Ranks</h2><table id="ranks"></table></section>
<section id="crossrank" hidden><h2>Cross-rank</h2><p id="xhead"></p><p id="xstraggler"></p>
<div><h3>Per rank (mean per step; wait: time in collectives waiting for the other ranks)</h3><table id="xranks"></table></div>
<div><h3>Collectives (time: the fastest rank of each)</h3><table id="xcolls"></table></div><ul id="xnotes" class="muted"></ul></section>
<section id="memory" hidden><h2>Memory timeline</h2><label>Snapshot <select id="snap"></select></label>
<button id="snapopen" type="button">Show</button> <span id="memstatus" class="muted"></span><div id="memframe"></div></section>
<section hidden><h2>Notes</h2><ul id="notes"></ul></section>
</div></main>
<script>""" + _SCRIPT + """</script></body></html>
""")
