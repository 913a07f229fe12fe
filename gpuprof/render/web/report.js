// gpuprof's report drawing, one copy for every HTML surface: the TensorBoard tab (gpuprof/tbplugin/page.py)
// and the standalone page of `gpuprof analyze --html` / `gpuprof diff --html` (gpuprof/htmlpage/page.py).
// Each surface inlines this file before its own script, so both draw summary cards, step charts, findings,
// the sortable, searchable tables of the views (docs/views.md) and the comparison of two runs (docs/diff.md,
// GP.diff) with the same code.
//
// Inert whatever the data holds: values reach the DOM only as Text nodes, textContent and setAttribute of
// fixed attribute names; charts are SVG elements built with createElementNS. No innerHTML, no style
// attribute, no URL attribute, no event-handler attribute (listeners are functions, never strings).
"use strict";
const GP = (() => {
  const SVGNS = "http://www.w3.org/2000/svg";
  const SHORT = 300, LONG = 2000;
  const PALETTE = ["#1a73e8", "#e8710a", "#188038", "#d93025", "#9334e6", "#f9ab00", "#80868b", "#12b5cb"];

  function short(s, n = SHORT){ s = s === null || s === undefined ? "" : String(s);
    return s.length > n ? s.slice(0, n) + "\u2026 (" + (s.length - n) + " more characters)" : s; }
  function el(tag, attrs, ...kids){ const e = document.createElement(tag);
    for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
    e.append(...kids.filter(k => k !== null && k !== undefined).map(k => typeof k === "object" ? k : String(k))); return e; }
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
  function fmtNum(x){ if (!num(x)) return "-"; if (Number.isInteger(x)) return String(x);
    const a = Math.abs(x); return a >= 100 ? x.toFixed(0) : a >= 1 ? x.toFixed(2) : x.toPrecision(3); }
  function fmtSI(x){ if (!num(x)) return "-"; const a = Math.abs(x);
    for (const [d, s] of [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) if (a >= d) return (x / d).toFixed(2) + " " + s;
    return fmtNum(x); }
  function sev(s){ return ["error", "warning", "info"].includes(s) ? s : "info"; }

  // --- tables: click a header to sort by it (again: the other way), type in the box to filter ---------------
  // A column: {head, get: row -> the value sorted on, show?: row -> the text shown, name?: left-aligned and searched}.
  // Missing values (null, "-") sort last in either direction.
  function miss(x){ return x === null || x === undefined || x === ""; }
  function cmp(x, y){
    const nx = miss(x), ny = miss(y);
    if (nx || ny) return nx === ny ? 0 : nx ? 1 : -1;
    if (typeof x === "number" && typeof y === "number") return x - y;
    if (typeof x === "boolean" && typeof y === "boolean") return +x - +y;
    return String(x).localeCompare(String(y));
  }
  // A column may colour its cells: cls(row) -> "better", "worse" or "" (a fixed class name, never from the data).
  function cellAttrs(c, r){ const k = c.cls ? c.cls(r) : "", n = c.name ? "name" : "";
    const v = [n, k === "better" || k === "worse" ? k : ""].filter(Boolean).join(" "); return v ? {class: v} : {}; }
  function table(cols, rows, opts = {}){
    const t = el("table", opts.id ? {id: opts.id, class: "gp-table"} : {class: "gp-table"});
    let key = -1, dir = 1, filter = "";
    const ths = cols.map((c, i) => { const th = el("th", {class: c.name ? "name sortable" : "sortable", title: "click to sort"}, c.head);
      th.addEventListener("click", () => { dir = key === i ? -dir : (c.name ? 1 : -1); key = i; draw(); }); return th; });
    const count = el("span", {class: "muted gp-count"});
    function draw(){
      let rs = rows;
      if (filter) rs = rs.filter(r => cols.some(c => c.name && String(c.get(r) === null || c.get(r) === undefined ? "" : c.get(r)).toLowerCase().includes(filter)));
      if (key >= 0){ const g = cols[key].get, d = dir; rs = rs.slice().sort((a, b) => { const x = g(a), y = g(b), n = cmp(x, y);
        return miss(x) || miss(y) ? n : n * d; }); }
      ths.forEach((th, i) => th.setAttribute("aria-sort", i === key ? (dir > 0 ? "ascending" : "descending") : "none"));
      t.replaceChildren(el("tr", {}, ...ths), ...rs.map(r => el("tr", {}, ...cols.map(c =>
        el("td", cellAttrs(c, r), c.show ? c.show(r) : short(c.get(r)))))));
      count.textContent = filter ? rs.length + " of " + rows.length + " rows match" : rows.length + " rows";
    }
    draw();
    if (!opts.search) return t;
    const box = el("input", {type: "search", placeholder: "search " + (opts.what || "names"), "aria-label": "search " + (opts.what || "names")});
    box.addEventListener("input", () => { filter = String(box.value).toLowerCase(); draw(); });
    return el("div", {class: "gp-tablebox"}, el("div", {class: "gp-tools"}, box, " ", count), el("div", {class: "gp-scroll"}, t));
  }

  // --- the views (docs/views.md): every field a row carries, known ones with their own heading and unit -----
  const FIELDS = {
    name: ["name", "name"], input_shapes: ["input shapes", "name"], calls: ["calls", "count"],
    cpu_self_us: ["CPU self", "us"], cpu_total_us: ["CPU total", "us"], gpu_self_us: ["GPU self", "us"], gpu_total_us: ["GPU total", "us"],
    total_us: ["total", "us"], mean_us: ["mean", "us"], max_us: ["longest", "us"], tensor_cores: ["tensor cores", "bool"],
    op_dtype: ["input dtype", "text"], precision: ["precision", "text"], flops: ["FLOPs", "si"], flops_source: ["FLOPs from", "text"],
    tflops: ["TFLOP/s", "fixed"], mfu: ["MFU", "pct"], peak_precision: ["MFU peak", "text"],
    reference_mfu: ["MFU vs dense BF16/FP16", "pct"], grid: ["grid", "dims"], block: ["block", "dims"],
    registers_per_thread: ["registers", "count"], occupancy: ["occupancy", "pct"], stacks: ["called from", "lines"],
  };
  const VIEW_NAMES = {operators: "operator", kernels: "kernel", modules: "module", ranges: "range"};
  function kindOf(key, value){
    if (FIELDS[key]) return FIELDS[key][1];
    if (Array.isArray(value)) return value.every(num) ? "dims" : "lines";
    if (typeof value === "boolean") return "bool";
    if (typeof value === "number") return key.endsWith("_us") ? "us" : /(share|fraction|ratio|mfu|utilization)$/.test(key) ? "pct" :
      /bytes$/.test(key) ? "bytes" : /flops$/.test(key) ? "si" : "number";
    return typeof value === "string" || value === null ? "text" : null;  // objects: not a column
  }
  function column(view, key, kind){
    const head = key === "name" ? VIEW_NAMES[view] || "name" : FIELDS[key] ? FIELDS[key][0] : key.replace(/_us$/, "").replace(/_/g, " ");
    const v = r => r[key] === undefined ? null : r[key];
    switch (kind){
      case "name": return {head, name: true, get: v, show: r => short(v(r) === null ? "-" : v(r))};
      case "lines": return {head, name: true, get: r => (v(r) || []).join("\n") || null, show: r => (v(r) || []).map(s => short(s)).join("\n") || "-"};
      case "text": return {head, get: v, show: r => v(r) === null ? "-" : short(v(r), 80)};
      case "bool": return {head, get: v, show: r => v(r) === null ? "-" : v(r) ? "yes" : "no"};
      case "dims": return {head, get: r => v(r) ? v(r).reduce((a, b) => a * b, 1) : null, show: r => v(r) ? v(r).join("\u00d7") : "-"};
      case "us": return {head, get: v, show: r => fmtUs(v(r))};
      case "pct": return {head, get: v, show: r => fmtPct(v(r))};
      case "bytes": return {head, get: v, show: r => fmtB(v(r))};
      case "si": return {head, get: v, show: r => fmtSI(v(r))};
      case "fixed": return {head, get: v, show: r => num(v(r)) ? v(r).toFixed(1) : "-"};
      default: return {head, get: v, show: r => fmtNum(v(r))};
    }
  }
  // Columns for every field the rows carry (also fields this file does not know: generic units by name and type);
  // a field no row has a value for is left out and named under the table instead.
  function viewColumns(view, rows){
    const keys = [];
    for (const r of rows.slice(0, 50)) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
    keys.sort((a, b) => (a !== "name") - (b !== "name"));
    const cols = [], empty = [];
    for (const k of keys){
      const sample = rows.find(r => r[k] !== null && r[k] !== undefined && !(Array.isArray(r[k]) && !r[k].length));
      const kind = kindOf(k, sample ? sample[k] : null); if (!kind) continue;
      const c = column(view, k, kind); if (sample || k === "name") cols.push(c); else empty.push(c.head); }
    return {cols, empty};
  }
  const VIEW_TITLES = {operators: "Operators (by name and input shapes)", kernels: "Kernels", modules: "Modules (nn.Module paths)",
                       ranges: "User ranges (record_function)"};
  const VIEW_EMPTY = {operators: "no operators in this trace", kernels: "no kernels in this trace",
    modules: "none recorded (profile with with_stack=True or with_modules=True)", ranges: "no record_function ranges in this trace"};
  // One trace's views: a heading, the totals, and each view's whole table (every row the report kept).
  // Tables get the ids view-<kind><suffix> (a page with several traces gives each a suffix).
  function views(box, v, suffix = ""){
    box.replaceChildren();
    if (!v){ box.append(el("p", {class: "muted"}, "This report has no views (written by a gpuprof before report schema 1.2).")); return; }
    box.append(el("p", {class: "muted"}, "GPU time in kernels: " + fmtUs(v.kernel_total_us) + " over the whole trace" +
      (num(v.unattributed_gpu_us) && v.unattributed_gpu_us > 0 ? " (" + fmtUs(v.unattributed_gpu_us) + " with no known launching operator)" : "") +
      (v.peak_device ? " \u00b7 MFU against the peaks of " + short(v.peak_device, 80) : "") + ". Times are totals over the trace, not per step."));
    for (const kind of ["operators", "kernels", "modules", "ranges"]){
      const rows = Array.isArray(v[kind]) ? v[kind] : [];
      const sec = el("div", {class: "gp-view", "data-view": kind}, el("h3", {}, VIEW_TITLES[kind]));
      if (!rows.length){ sec.append(el("p", {class: "muted"}, VIEW_EMPTY[kind])); box.append(sec); continue; }
      const {cols, empty} = viewColumns(kind, rows);
      sec.append(table(cols, rows, {search: true, id: "view-" + kind + suffix, what: VIEW_NAMES[kind] + " names"}));
      if (empty.length) sec.append(el("p", {class: "muted gp-empty"}, "not in this trace: " + empty.join(", ")));
      const rest = (v.rest || {})[kind];
      if (rest) sec.append(el("p", {class: "muted gp-rest"}, (num(rest.rows) ? rest.rows + " more rows" : "more rows") + " past the " + rows.length +
        " kept, summed: " + Object.keys(rest).filter(k => k !== "rows").map(k => column(kind, k, kindOf(k, rest[k])).head + " " +
        column(kind, k, kindOf(k, rest[k])).show(rest)).join(", ")));
      box.append(sec);
    }
  }

  // --- summary cards, findings, step charts --------------------------------------------------------------
  function card(k, v){ return el("div", {class: "card"}, el("div", {class: "k"}, k), el("div", {class: "v"}, v)); }
  function cards(h, nFindings){
    return [card("devices", h.devices.length ? h.devices.map(d => short(d)).join(", ") : "no GPU in the trace"),
      card("steps analysed", String(h.steps)), card("median step", fmtUs(h.step_time_us)), card("mean step", fmtUs(h.step_time_mean_us)),
      card("GPU utilisation", h.gpu_utilization === null || h.gpu_utilization === undefined ? "n/a (no GPU activity)" : fmtPct(h.gpu_utilization)),
      ...(h.comm_wait_text ? [card("waiting in collectives", h.comm_wait_text)] : []),
      ...(h.mfu_text ? [card("MFU", h.mfu_text)] : []),
      card("traces", String(h.traces)), card("findings", String(nFindings))];
  }
  function fmtEvidence(unit, x){ return unit === "us" ? fmtUs(x) : unit === "fraction" ? fmtPct(x) : unit === "bytes" ? fmtB(x) :
    short(String(x)) + (unit ? " " + short(unit) : ""); }
  function evidenceRows(f){
    return (f.evidence || []).map(e => el("tr", {}, el("td", {class: "name"}, short(e.metric)), el("td", {}, fmtEvidence(e.unit, e.value)),
      el("td", {}, e.threshold === null || e.threshold === undefined ? "" : "threshold " + fmtEvidence(e.unit, e.threshold)),
      el("td", {}, (e.events || []).length ? (e.events.length + " events, e.g. " + short(e.events[0].name, 120)) : "")));
  }
  // A finding as every renderer states it: display_message / display_cost (gpuprof.render.format) when given.
  function findings(list, empty){
    if (!list.length) return [el("p", {class: "muted"}, empty || "No findings.")];
    return list.map(f => {
      const l = f.location;
      const loc = l && typeof l === "object" && l.file ? short(l.file) + (l.line ? ":" + l.line : "") + (l.function ? " (" + short(l.function) + ")" : "") : null;
      const from = f.scope === "cross-rank" ? "cross-rank analysis" : !f.origin || f.origin === "trace" ? "trace analysis" + (f.trace ? " of " + short(f.trace) : "")
        : short(f.origin) + (f.report ? " (from " + short(f.report) + ")" : "");
      const ev = evidenceRows(f);
      return el("div", {class: "finding " + sev(f.severity), "data-code": short(f.code, 40)},
        el("div", {class: "head"}, short(f.code, 40) + " " + short(f.name || ""), el("span", {class: "tag"}, sev(f.severity)), el("span", {class: "tag"}, from)),
        el("div", {class: "msg"}, short(f.display_message || f.message, LONG)),
        el("div", {class: "meta"}, "cost " + short(f.display_cost || "not estimated") + (loc ? " \u00b7 at " + loc : "")),
        f.display_what_if ? el("div", {class: "meta"}, "what-if " + short(f.display_what_if, LONG)) : null,
        // a report over several traces: the traces this finding applies to, each with its cost (gpuprof.render.groups)
        f.applies_to ? el("div", {class: "meta traces"}, "traces: " + short(f.applies_to, LONG)) : null,
        f.advice ? el("div", {class: "fix"}, "Fix: " + short(f.advice, LONG)) : null,
        ev.length ? el("table", {}, ...ev) : null);
    });
  }
  function legend(keys, colors, labels){
    return el("div", {class: "legend"}, ...keys.map(k => el("span", {}, svg("svg", {width: 10, height: 10, "aria-hidden": "true"},
      svg("rect", {width: 10, height: 10, fill: colors[k]})), " " + short((labels || {})[k] || k, 200)))); }
  // Stacked bars, one per step: bar.parts[k] for each key of `colors`, bottom to top in its order.
  function stepChart(box, bars, colors, title, labels){
    const keys = Object.keys(colors), W = Math.max(520, Math.min(1200, 60 + bars.length * 26)), H = 220;
    const M = {l: 64, r: 10, t: 10, b: 34};
    const totals = bars.map(s => keys.reduce((a, k) => a + (s.parts[k] || 0), 0));
    const ymax = Math.max(1, ...totals) * 1.05, bw = (W - M.l - M.r) / Math.max(bars.length, 1);
    const Y = v => H - M.b - v / ymax * (H - M.t - M.b);
    const g = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": title});
    for (let k = 0; k <= 4; k++){ const v = ymax * k / 4;
      g.append(svg("line", {x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), stroke: "#eee"}),
               svg("text", {x: M.l - 6, y: Y(v) + 4, "text-anchor": "end"}, fmtUs(v))); }
    bars.forEach((s, i) => {
      let base = 0; const x = M.l + i * bw + bw * 0.15, w = Math.max(1, bw * 0.7);
      for (const k of keys){ const v = s.parts[k] || 0; if (!(v > 0)) continue;
        const r = svg("rect", {class: "bar", x: x, y: Y(base + v), width: w, height: Math.max(0.5, Y(base) - Y(base + v)), fill: colors[k]});
        r.append(svg("title", {}, "step " + short(s.id, 40) + " \u00b7 " + short((labels || {})[k] || k, 200) + ": " + fmtUs(v) + " (" + fmtPct(v / (totals[i] || 1)) + ")"));
        g.append(r); base += v; }
      if (bars.length <= 40 || i % Math.ceil(bars.length / 40) === 0)
        g.append(svg("text", {x: x + w / 2, y: H - M.b + 14, "text-anchor": "middle"}, short(s.id, 12)));
    });
    g.append(svg("text", {x: (M.l + W - M.r) / 2, y: H - 4, "text-anchor": "middle"}, "step"));
    box.replaceChildren(legend(keys, colors, labels), el("div", {class: "chart"}, g));
    document.body.dataset.bars = String(bars.length);
  }

  // --- the whole job (report.json's job, docs/run.md): the step-time series over its phases, then the phases --
  const PHASE_COLORS = {warmup: "#fde9c8", steady: "#e6f4ea", slowdown: "#fce8e6", eval: "#e8f0fe", recorded: "#f1e6fd"};
  const WINDOW_COLORS = {default: "#8430ce", anomaly: "#d93025", trigger: "#e37400"};
  function jobChart(box, job){
    const s = job && job.series || {}, xs = Array.isArray(s.first_step) ? s.first_step : [], ys = Array.isArray(s.step_time_us) ? s.step_time_us : [];
    const hi = Array.isArray(s.step_time_max_us) ? s.step_time_max_us : ys, steps = num(job.steps) ? job.steps : xs.length;
    const phases = Array.isArray(job.phases) ? job.phases : [];
    const W = 900, H = 220, M = {l: 64, r: 10, t: 10, b: 34}, n = Math.max(steps, 1);
    const ymax = Math.max(1, ...ys.filter(num)) * 1.3;
    const X = v => M.l + v / n * (W - M.l - M.r), Y = v => H - M.b - Math.min(v, ymax) / ymax * (H - M.t - M.b);
    const g = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "step time over the job, with its phases"});
    for (const p of phases){ if (!num(p.start_step) || !num(p.end_step)) continue;
      const r = svg("rect", {class: "phase", x: X(p.start_step), y: M.t, width: Math.max(1, X(p.end_step + 1) - X(p.start_step)), height: H - M.t - M.b,
        fill: PHASE_COLORS[p.kind] || "#eeeeee", "data-kind": short(p.kind, 24)});
      r.append(svg("title", {}, short(p.kind, 24) + " steps " + p.start_step + "-" + p.end_step + ": median " + fmtUs(p.step_time_median_us)));
      g.append(r); }
    for (let k = 0; k <= 4; k++){ const v = ymax * k / 4;
      g.append(svg("line", {x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), stroke: "#eee"}), svg("text", {x: M.l - 6, y: Y(v) + 4, "text-anchor": "end"}, fmtUs(v))); }
    const bucket = num(s.bucket) && s.bucket > 0 ? s.bucket : 1;
    const line = (vals, color, cls) => { const pts = []; vals.forEach((v, i) => { if (num(v) && num(xs[i])) pts.push(X(xs[i] + bucket / 2).toFixed(1) + "," + Y(v).toFixed(1)); });
      if (pts.length) g.append(svg("polyline", {class: cls, points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.2})); };
    // the recorded windows (job.windows: the default one, anomaly and trigger windows) as marks along the top, so a
    // reader sees which steps have a detailed trace (gpuprof analyze DIR reads them)
    const wins = (Array.isArray(job.windows) ? job.windows : []).filter(w => num(w.start_step) && num(w.steps));
    for (const w of wins){
      const r = svg("rect", {class: "job-window", x: X(w.start_step), y: M.t, width: Math.max(2, X(w.start_step + w.steps) - X(w.start_step)),
        height: 8, fill: WINDOW_COLORS[w.reason] || "#5f6368", "data-reason": short(w.reason, 24)});
      r.append(svg("title", {}, short(w.reason, 24) + " window: steps " + w.start_step + "-" + (w.start_step + w.steps - 1) + " recorded"));
      g.append(r); }
    if (hi !== ys) line(hi, "#f4b4ae", "job-max");
    line(ys, "#1a73e8", "job-median");
    for (let k = 0; k <= 4; k++){ const v = Math.round(n * k / 4); g.append(svg("text", {x: X(v), y: H - M.b + 14, "text-anchor": "middle"}, String(v))); }
    g.append(svg("text", {x: (M.l + W - M.r) / 2, y: H - 4, "text-anchor": "middle"}, "step" + (bucket > 1 ? " (a point = " + bucket + " steps: median, and maximum in red)" : "")));
    const kinds = [...new Set(phases.map(p => String(p.kind)))].filter(k => k in PHASE_COLORS);
    const rows = phases.map(p => ({k: p.kind, a: p.start_step, b: p.end_step, n: p.steps, m: p.step_time_median_us, p90: p.step_time_p90_us, w: p.data_wait_share}));
    box.replaceChildren(legend(kinds, PHASE_COLORS), el("div", {class: "chart"}, g),
      table([{head: "phase", name: true, get: r => r.k}, {head: "first step", get: r => r.a, show: r => fmtNum(r.a)}, {head: "last step", get: r => r.b, show: r => fmtNum(r.b)},
        {head: "steps", get: r => r.n, show: r => fmtNum(r.n)}, {head: "median step", get: r => r.m, show: r => fmtUs(r.m)},
        {head: "p90", get: r => r.p90, show: r => fmtUs(r.p90)}, {head: "data wait", get: r => r.w, show: r => fmtPct(r.w)}], rows, {id: "job-phases"}),
      ...(wins.length ? [table([{head: "recorded window", name: true, get: w => w.reason}, {head: "first step", get: w => w.start_step, show: w => fmtNum(w.start_step)},
        {head: "last step", get: w => w.start_step + w.steps - 1, show: w => fmtNum(w.start_step + w.steps - 1)},
        {head: "steps", get: w => w.steps, show: w => fmtNum(w.steps)}], wins, {id: "job-windows"})] : []));
    document.body.dataset.jobPoints = String(ys.length);
  }

  // --- a comparison: the diff document of `gpuprof diff` (docs/diff.md), drawn whole ---------------------------
  // The one drawing of a diff, for `gpuprof diff --html` and the TensorBoard tab's "Compare with" section alike.
  // Tables get the ids <prefix>metrics, <prefix>steps-chart, <prefix>findings-<removed|added|changed|unchanged>,
  // <prefix><operators|kernels>-<slower|faster|added|removed>; every row the document holds is drawn.
  function signed(x, f){ return num(x) ? (x > 0 ? "+" : x < 0 ? "-" : "") + f(Math.abs(x)) : "-"; }
  // a time saved per step: unsigned when saved, with a minus when the step got longer (the terminal's convention,
  // gpuprof.diff.render._saving), so a saving never reads "+" beside a change column that reads "-" for the same time
  function saving(x, f){ return num(x) ? (x < 0 ? "-" : "") + f(Math.abs(x)) : "-"; }
  // better/worse for a change of `delta` in a metric where lower is better (or not); within 0.5% of `base`: neither
  function judge(delta, lowerIsBetter, base){
    if (!num(delta) || delta === 0 || (num(base) && base !== 0 && Math.abs(delta / base) <= 0.005)) return "";
    return (delta < 0) === !!lowerIsBetter ? "better" : "worse"; }
  const ROW_FIELDS = {gpu_self_us: "GPU self", cpu_self_us: "CPU self", total_us: "time", calls: "calls"};
  const WHICH = {slower: "slower", faster: "faster", added: "only after", removed: "only before",
                 within_noise: "within the noise of a per-step mean"};
  function diffRows(kind, which, rows, id){
    const fields = [];  // the measured fields the rows carry, as <field>_before/_after (calls too)
    for (const r of rows.slice(0, 50)) for (const k of Object.keys(r)) { const m = /^(.*)_before$/.exec(k);
      if (m && !fields.includes(m[1])) fields.push(m[1]); }
    const head = f => ROW_FIELDS[f] || f.replace(/_us$/, "").replace(/_/g, " ");
    const show = (f, x) => f.endsWith("_us") ? fmtUs(x) : fmtNum(x);
    const cols = [{head: kind === "operators" ? "operator" : "kernel", name: true, get: r => r.name === undefined ? null : r.name,
                   show: r => short(r.name)}];
    if (kind === "operators") cols.push({head: "input shapes", name: true, get: r => r.input_shapes || null, show: r => short(r.input_shapes || "-")});
    cols.push({head: "change / step", get: r => r.change_us, show: r => signed(r.change_us, fmtUs), cls: r => judge(r.change_us, true)},
      {head: "change", get: r => r.change, show: r => num(r.change) ? signed(100 * r.change, x => x.toFixed(1) + "%") : "-",
       cls: r => judge(r.change_us, true)},
      {head: "measured on", get: r => r.measure ? head(String(r.measure)) : null});
    for (const f of fields) cols.push({head: head(f) + " before", get: r => r[f + "_before"], show: r => show(f, r[f + "_before"])},
                                      {head: head(f) + " after", get: r => r[f + "_after"], show: r => show(f, r[f + "_after"])});
    return table(cols, rows, {search: true, id, what: (kind === "operators" ? "operator" : "kernel") + " names"});
  }
  function findingCols(){ return [{head: "finding", name: true, get: r => short(r.code, 40) + " " + short(r.name)},
    {head: "where", name: true, get: r => r.location || null, show: r => short(r.location || "-")}]; }
  function msgCol(side){ return {head: "message", name: true, get: r => r["message_" + side] || null, show: r => short(r["message_" + side] || "-", LONG)}; }
  function diff(box, d, prefix = ""){
    const sub = (title, ...kids) => el("div", {class: "gp-diff"}, el("h3", {}, title), ...kids);
    const side = s => short(s.label) + " (" + s.traces + (s.traces === 1 ? " trace, " : " traces, ") + s.steps + " steps" +
      (s.devices && s.devices.length ? ", " + s.devices.map(x => short(x, 80)).join(", ") : "") + ")";
    const out = [el("p", {class: "gp-sides"}, "before: " + side(d.before) + " \u2192 after: " + side(d.after))];
    const reg = d.regression;
    if (reg) out.push(el("p", {class: reg.regressed ? "bad" : "good"}, (reg.regressed ? "REGRESSION: " : "no regression: ") + short(reg.reason, LONG)));
    const pct = m => m.unit === "fraction";
    const metricName = n => n === "step_time" ? "step time (median)" : n === "step_time_mean" ? "step time (mean)" : n === "gpu_busy" ? "GPU busy" :
      n === "gpu_utilization" ? "GPU utilisation" : n === "gpu_idle" ? "GPU idle" : n.replace(/^breakdown\./, "step: ").replace(/^idle\./, "GPU idle: ");
    const metricCols = [{head: "per step (means; step time: median and mean)", name: true, get: m => metricName(String(m.name))},
      {head: "before", get: m => m.before, show: m => pct(m) ? fmtPct(m.before) : fmtUs(m.before)},
      {head: "after", get: m => m.after, show: m => pct(m) ? fmtPct(m.after) : fmtUs(m.after)},
      {head: "change", get: m => num(m.before) && num(m.after) ? m.after - m.before : null,
       show: m => !num(m.before) || !num(m.after) ? "-" : pct(m) ? signed(100 * (m.after - m.before), x => x.toFixed(1) + " points")
         : signed(m.after - m.before, fmtUs) + (num(m.change) ? " (" + signed(100 * m.change, x => x.toFixed(1) + "%") + ")" : ""),
       cls: m => num(m.before) && num(m.after) ? judge(m.after - m.before, m.lower_is_better, m.before) : ""},
      {head: "noise", get: m => m.noise, show: m => (!num(m.noise) ? "-" : pct(m) ? fmtPct(m.noise) : fmtUs(m.noise))
        + (m.within_noise ? " (within noise)" : "")}];
    out.push(sub("Per step, before \u2192 after", table(metricCols, d.metrics.filter(m => m.before || m.after), {id: prefix + "metrics"})));
    const chart = el("div", {id: prefix + "steps-chart"});
    out.push(sub("Step times, before and after", chart));
    if (d.ranks && d.ranks.length) out.push(sub("Median step per rank", table([{head: "rank", get: r => r.rank},
      {head: "before", get: r => r.before_step_us, show: r => fmtUs(r.before_step_us)}, {head: "after", get: r => r.after_step_us, show: r => fmtUs(r.after_step_us)},
      {head: "change", get: r => r.change, show: r => num(r.change) ? signed(100 * r.change, x => x.toFixed(1) + "%") : "-", cls: r => judge(r.change, true)}],
      d.ranks, {id: prefix + "ranks"})));
    const f = d.findings;
    const fixed = f.removed.filter(r => r.fixed !== false), gone = f.removed.filter(r => r.fixed === false);
    out.push(sub("Findings fixed (" + fixed.length + "): predicted vs measured saving per step", fixed.length ? table([...findingCols(),
      {head: "predicted", get: r => r.predicted_saving_us_per_step, show: r => fmtUs(r.predicted_saving_us_per_step)},
      {head: "measured (step)", get: r => r.measured_saving_us_per_step, show: r => saving(r.measured_saving_us_per_step, fmtUs),
       cls: r => judge(-r.measured_saving_us_per_step, true)},
      {head: "measured (its part)", get: r => r.measured_part_saving_us_per_step,
       show: r => r.measured_part ? saving(r.measured_part_saving_us_per_step, fmtUs) + " " + short(r.measured_part, 80) : "-",
       cls: r => judge(-r.measured_part_saving_us_per_step, true)}, msgCol("before")], fixed, {id: prefix + "findings-removed"})
      : el("p", {class: "muted"}, "none")));
    if (gone.length) out.push(sub("Findings gone but not confirmed fixed (" + gone.length + ")", table([...findingCols(),
      {head: "why not", get: r => r.not_fixed_reason, show: r => short(r.not_fixed_reason, 300)}], gone, {id: prefix + "findings-gone"})));
    const cost = (k, c) => ({head: "cost " + k, get: r => r["cost_" + k + "_us_per_step"], show: r => fmtUs(r["cost_" + k + "_us_per_step"]), cls: c});
    const sevs = r => (r.severity_before || "-") + " \u2192 " + (r.severity_after || "-");
    for (const [k, title, cols] of [
      ["added", "Findings new", [...findingCols(), cost("after", () => "worse"), msgCol("after")]],
      ["changed", "Findings changed", [...findingCols(), {head: "severity", get: sevs}, cost("before"),
        cost("after", r => num(r.cost_before_us_per_step) && num(r.cost_after_us_per_step) ?
          judge(r.cost_after_us_per_step - r.cost_before_us_per_step, true, r.cost_before_us_per_step) : ""), msgCol("after")]],
      ["unchanged", "Findings in both, unchanged", [...findingCols(), cost("before"), cost("after"), msgCol("after")]]]){
      const rows = f[k] || [];
      out.push(sub(title + " (" + rows.length + ")", rows.length ? table(cols, rows, {id: prefix + "findings-" + k}) : el("p", {class: "muted"}, "none")));
    }
    for (const kind of ["operators", "kernels"]) for (const which of ["slower", "faster", "added", "removed", "within_noise"]){
      const rows = (d[kind] || {})[which] || [];
      if (which === "within_noise" && !rows.length) continue;
      const title = (kind === "operators" ? "Operators (by name and input shapes) " : "Kernels ") + WHICH[which] + " (" + rows.length + ")";
      out.push(sub(title, rows.length ? diffRows(kind, which, rows, prefix + kind + "-" + which) : el("p", {class: "muted"}, "none")));
    }
    box.replaceChildren(...out);
    const bars = [...d.before.step_times_us.map((v, i) => ({id: "b" + i, parts: {before: v}})),
                  ...d.after.step_times_us.map((v, i) => ({id: "a" + i, parts: {after: v}}))];
    stepChart(chart, bars, {before: PALETTE[0], after: PALETTE[1]}, "step times, before and after",
              {before: "before: " + d.before.label, after: "after: " + d.after.label});
  }

  return {short, el, svg, num, fmtUs, fmtPct, fmtB, fmtNum, sev, table, viewColumns, views, card, cards, findings, legend, stepChart, jobChart,
          diff, PALETTE, LONG};
})();
