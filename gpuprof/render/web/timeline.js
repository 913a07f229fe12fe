// gpuprof's timeline drawing, GP.timeline(box, timeline, findings): part of the shared drawing code (report.js, then
// this file, inlined together by gpuprof/render/web/__init__.py), so the TensorBoard tab and the `--html` page draw
// a trace's recorded steps the same way, from the report's `traces[].timeline` (docs/views.md, "Timeline").
//
// Lanes (host threads, GPU streams, a rank's collectives) on one canvas: wheel or the buttons zoom, dragging pans,
// hovering names the event under the pointer, the critical path of the median step is outlined in red, and each
// finding is a marker that takes you to its card. Inert like report.js: lane labels, the hover line and the marker
// buttons are Text nodes and textContent; event names inside the boxes are canvas pixels (fillText); no URL, no
// style attribute, nothing fetched.
"use strict";
GP.timeline = (() => {
  const {el, short, fmtUs, num} = GP;
  const ROW = 12, GAP = 6, AXIS = 22, MAX_DEPTH = 8;
  const KIND_COLORS = {op: "#80868b", runtime: "#f9ab00", annotation: "#12b5cb", kernel: "#1a73e8", memcpy: "#e8710a",
    memset: "#b06000", sync: "#3c4043", collective: "#9334e6"};
  const SEV_COLORS = {error: "#b00020", warning: "#e37400", info: "#1a73e8"};
  const CRIT = "#d93025";
  const arr = x => Array.isArray(x) ? x : [];
  const int = (x, lo, hi) => num(x) ? Math.max(lo, Math.min(hi, Math.floor(x))) : lo;

  // The finding card of `code` in this document (GP.findings draws them with data-code), flashed and scrolled to.
  function goTo(code){
    const want = short(code, 40);
    const card = [...document.querySelectorAll(".finding")].find(c => c.getAttribute("data-code") === want);
    if (!card) return false;
    card.scrollIntoView({block: "center"});
    card.classList.add("gp-flash");
    setTimeout(() => card.classList.remove("gp-flash"), 1500);
    return true;
  }

  function draw(box, tl, findings){
    box.replaceChildren();
    if (!tl || typeof tl !== "object"){
      box.append(el("p", {class: "muted"}, "No timeline for this trace (a report written before schema 1.5, or a trace without steps)."));
      return;
    }
    const names = arr(tl.names).map(n => String(n)), kinds = arr(tl.kinds).map(k => String(k));
    const lanes = arr(tl.lanes).filter(l => l && typeof l === "object");
    const steps = arr(tl.steps).filter(s => s && num(s.start_us) && num(s.end_us));
    const sevOf = {};
    for (const f of arr(findings)) if (f && !(f.code in sevOf)) sevOf[f.code] = f;
    const markers = arr(tl.markers).filter(m => m && m.code in sevOf && num(m.start_us) && num(m.end_us));
    const critical = arr(tl.critical).filter(c => Array.isArray(c) && c.length === 6 && num(c[1]) && num(c[2]));
    const span = num(tl.span_us) && tl.span_us > 0 ? tl.span_us : 1;
    const index = new Map(lanes.map((l, i) => [String(l.id), i]));
    const layout = [];
    let H = AXIS;
    for (const l of lanes){ const d = int(l.depth, 1, MAX_DEPTH); layout.push({top: H + GAP / 2, d}); H += d * ROW + GAP; }
    const rows = lanes.map(l => arr(l.events).filter(r => Array.isArray(r) && r.length === 6 && num(r[0]) && num(r[1])));
    const crit = num(tl.critical_step) ? steps[tl.critical_step] : null;

    // --- the frame: toolbar, hover line, lane labels beside the canvas, markers, legend --------------------------
    const btn = (text, title) => el("button", {type: "button", title}, text);
    const zin = btn("+", "zoom in"), zout = btn("\u2212", "zoom out"), fit = btn("fit", "show every recorded step");
    const tools = [zin, zout, fit];
    let med = null;
    if (crit){ med = btn("median step", "zoom to the median step (the one the critical path is of)"); tools.push(med); }
    const left = tl.left_out && typeof tl.left_out === "object" ? Object.keys(tl.left_out).filter(k => num(tl.left_out[k]) && tl.left_out[k] > 0) : [];
    const summary = lanes.length + " lanes \u00b7 " + (num(tl.events_total) ? tl.events_total : "?") + " events drawn as " +
      (num(tl.events_kept) ? tl.events_kept : "?") + " boxes (events shorter than " + fmtUs(tl.resolution_us) +
      (crit && num(tl.step_resolution_us) && tl.step_resolution_us < tl.resolution_us ? ", " + fmtUs(tl.step_resolution_us) +
       " in the median step," : "") + " that start together are one pale box) \u00b7 " + (critical.length ? "critical path of step " + (crit ? crit.id : "?") +
      " outlined in red" : "critical path not computed for this trace") +
      (left.length ? " \u00b7 left out: " + left.map(k => tl.left_out[k] + " " + short(k, 20)).join(", ") : "");
    const info = el("div", {class: "gp-tl-info", "aria-live": "polite"}, "Hover a box for its name and duration; wheel or +/\u2212 to zoom, drag to pan.");
    const labels = el("div", {class: "gp-tl-labels"}, el("div", {class: "gp-tl-axis"}, "time \u2192"),
      ...lanes.map((l, i) => el("div", {class: "gp-tl-lane gp-tl-d" + layout[i].d,
        title: short(l.label || "", 300) + " [" + short(l.id, 120) + "]"}, short(l.label || l.id, 80))));
    const cv = el("canvas", {tabindex: 0, role: "img", "aria-label": "timeline of the recorded steps"});
    const plot = el("div", {class: "gp-tl-plot"}, cv);
    const counts = {};
    for (const m of markers) counts[m.code] = (counts[m.code] || 0) + 1;
    const marks = Object.keys(counts).map(code => { const b = el("button", {type: "button", class: "gp-tl-mark " + GP.sev(sevOf[code].severity),
      title: "go to the finding"}, short(code, 40) + " \u00d7" + counts[code]); b.addEventListener("click", () => goTo(code)); return b; });
    const legend = GP.legend([...kinds.filter(k => k in KIND_COLORS), "critical"], {...KIND_COLORS, critical: CRIT},
      {critical: "critical path (median step)"});
    box.append(el("div", {class: "gp-tl-tools"}, ...tools, " ", el("span", {class: "muted"}, summary)), info,
      el("div", {class: "gp-tl-frame"}, labels, plot), ...(marks.length ? [el("div", {class: "gp-tl-marks"}, "Findings here: ", ...marks)] : []),
      legend);

    // --- the view: [t0, t1] µs of the relative clock, drawn at W css pixels ---------------------------------------
    let t0 = 0, t1 = span, W = 1000;
    const dpr = (typeof window !== "undefined" && window.devicePixelRatio) || 1;
    function size(){
      W = Math.max(300, Math.floor(plot.clientWidth || 1000));
      cv.setAttribute("width", String(Math.round(W * dpr))); cv.setAttribute("height", String(Math.round(H * dpr)));
    }
    function paint(){
      const ctx = cv.getContext("2d"); if (!ctx) return;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, W, H);
      const k = W / (t1 - t0), X = t => (t - t0) * k;
      ctx.font = "10px system-ui, sans-serif"; ctx.textBaseline = "middle";
      layout.forEach((g, i) => { if (i % 2){ ctx.fillStyle = "#f6f6f6"; ctx.fillRect(0, g.top - GAP / 2, W, g.d * ROW + GAP); } });
      if (crit){ ctx.fillStyle = "rgba(217,48,37,0.05)"; ctx.fillRect(X(crit.start_us), AXIS, (crit.end_us - crit.start_us) * k, H - AXIS); }
      let drawn = 0;
      rows.forEach((evs, i) => {
        const top = layout[i].top, d = layout[i].d;
        for (const r of evs){
          const s = r[0], e = r[0] + Math.max(r[1], 0), depth = int(r[4], 0, MAX_DEPTH);
          if (e < t0 || s > t1 || depth >= d) continue;
          const x = Math.max(X(s), -1), w = Math.max(1, Math.min(X(e), W + 1) - x), y = top + depth * ROW;
          ctx.globalAlpha = r[5] > 1 ? 0.4 : 1;
          ctx.fillStyle = KIND_COLORS[kinds[r[3]]] || "#999"; ctx.fillRect(x, y, w, ROW - 1); drawn++;
          if (w > 40 && r[5] === 1){ const n = names[r[2]] || ""; ctx.globalAlpha = 1; ctx.fillStyle = "#fff";
            ctx.fillText(n.length * 5.5 > w - 4 ? n.slice(0, Math.max(0, Math.floor((w - 4) / 5.5) - 1)) + "\u2026" : n, x + 2, y + ROW / 2); }
        }
      });
      ctx.globalAlpha = 1;
      let critDrawn = 0;
      for (const c of critical){
        const i = index.get(String(c[0])); if (i === undefined || c[2] < t0 || c[1] > t1) continue;
        const g = layout[i], x = X(c[1]), w = Math.max(2, (c[2] - c[1]) * k);
        // a red band under the lane, and an outline round a run wide enough that outlines do not hide the boxes
        if (w >= 12){ ctx.strokeStyle = CRIT; ctx.lineWidth = 1.5; ctx.strokeRect(x, g.top - 1, w, g.d * ROW + 1); }
        ctx.fillStyle = CRIT; ctx.fillRect(x, g.top + g.d * ROW - 1, w, 3); critDrawn++;
      }
      let markDrawn = 0;
      for (const m of markers){
        const i = index.get(String(m.lane)); if (i === undefined || m.end_us < t0 || m.start_us > t1) continue;
        const g = layout[i], x = X(m.start_us), col = SEV_COLORS[GP.sev(sevOf[m.code].severity)];
        ctx.fillStyle = col; ctx.globalAlpha = 0.15; ctx.fillRect(x, g.top, Math.max(1, (m.end_us - m.start_us) * k), g.d * ROW);
        ctx.globalAlpha = 1; ctx.beginPath(); ctx.moveTo(x - 5, g.top - 3); ctx.lineTo(x + 5, g.top - 3); ctx.lineTo(x, g.top + 5); ctx.fill(); markDrawn++;
      }
      // the axis: steps and times
      ctx.fillStyle = "#444"; ctx.strokeStyle = "#999"; ctx.lineWidth = 1;
      for (const s of steps){ const x = X(s.start_us); if (x < 0 || x > W) continue;
        ctx.beginPath(); ctx.moveTo(x + 0.5, 0); ctx.lineTo(x + 0.5, H); ctx.stroke(); ctx.fillText("step " + short(s.id, 12), x + 3, 6); }
      const tick = niceStep((t1 - t0) / 8);
      for (let t = Math.ceil(t0 / tick) * tick; t <= t1; t += tick){ const x = X(t); ctx.fillRect(x, AXIS - 5, 1, 5); ctx.fillText(fmtUs(t), x + 2, AXIS - 9); }
      box.setAttribute("data-drawn", String(drawn)); box.setAttribute("data-critical", String(critDrawn));
      box.setAttribute("data-markers", String(markDrawn)); box.setAttribute("data-view", t0.toFixed(1) + " " + t1.toFixed(1));
    }
    function niceStep(x){ const p = Math.pow(10, Math.floor(Math.log10(Math.max(x, 1e-3)))); return [1, 2, 5, 10].map(m => m * p).find(v => v >= x) || 10 * p; }
    function zoom(f, at){ const c = at === undefined ? (t0 + t1) / 2 : at, w = Math.min(span * 1.2, Math.max((t1 - t0) * f, 1));
      const a = (c - t0) / (t1 - t0); t0 = c - a * w; t1 = t0 + w; paint(); }
    function show(a, b){ const pad = (b - a) * 0.02; t0 = a - pad; t1 = b + pad; paint(); }

    // --- what is under the pointer -------------------------------------------------------------------------------
    function at(px, py){
      const t = t0 + px / W * (t1 - t0), tol = 3 / W * (t1 - t0);
      const i = layout.findIndex(g => py >= g.top - GAP / 2 && py < g.top + g.d * ROW + GAP / 2);
      if (i < 0) return null;
      const g = layout[i], lane = lanes[i];
      const m = markers.find(x => String(x.lane) === String(lane.id) && py < g.top + 6 && Math.abs(x.start_us - t) <= tol * 2);
      if (m) return {marker: m};
      const depth = Math.floor((py - g.top) / ROW);
      let best = null;
      for (const r of rows[i]) if (int(r[4], 0, MAX_DEPTH) === depth && r[0] - tol <= t && r[0] + r[1] + tol >= t && (!best || r[1] > best[1])) best = r;
      const c = critical.find(x => String(x[0]) === String(lane.id) && x[1] - tol <= t && x[2] + tol >= t);
      return best || c ? {lane, row: best, crit: c} : null;
    }
    function describe(h){
      if (!h) return "";
      if (h.marker){ const f = sevOf[h.marker.code];
        return short(h.marker.code, 40) + " " + short(f.name || "", 80) + ": " + short(f.display_message || f.message || "", 300) + " (click: go to the finding)"; }
      const parts = [];
      if (h.row){ const r = h.row, n = short(names[r[2]] || "", 300), kind = kinds[r[3]] || "?";
        const res = crit && num(tl.step_resolution_us) && r[0] >= crit.start_us && r[0] < crit.end_us ? tl.step_resolution_us : tl.resolution_us;
        parts.push(r[5] > 1 ? r[5] + " events in " + fmtUs(r[1]) + ", each shorter than " + fmtUs(res) + "; the longest: " + n + " (" + kind + ")"
          : n + " \u00b7 " + kind + " \u00b7 " + fmtUs(r[1]) + " \u00b7 at " + fmtUs(r[0])); }
      if (h.crit) parts.push("on the critical path: " + (h.crit[5] > 1 ? h.crit[5] + " segments in " + fmtUs(h.crit[2] - h.crit[1]) +
        ", the longest: " : "") + short(h.crit[3], 40) + " " + short(h.crit[4], 200) + (h.crit[5] > 1 ? "" : " " + fmtUs(h.crit[2] - h.crit[1])));
      return parts.join(" \u00b7 ") + " \u00b7 " + short(h.lane.label || h.lane.id, 120);
    }

    // --- input: wheel zooms at the pointer, drag pans, keys, buttons ----------------------------------------------
    let drag = null, moved = false;
    const local = e => { const r = cv.getBoundingClientRect(); return [(e.clientX - r.left) * W / r.width, (e.clientY - r.top) * H / r.height]; };
    cv.addEventListener("wheel", e => { e.preventDefault(); const [x] = local(e);
      if (e.shiftKey || Math.abs(e.deltaX) > Math.abs(e.deltaY)){ const dt = (e.deltaX || e.deltaY) / W * (t1 - t0); t0 += dt; t1 += dt; paint(); return; }
      zoom(e.deltaY > 0 ? 1.25 : 0.8, t0 + x / W * (t1 - t0)); }, {passive: false});
    cv.addEventListener("mousedown", e => { drag = {x: local(e)[0], t0, t1}; moved = false; });
    cv.addEventListener("mousemove", e => { const [x, y] = local(e);
      if (drag && e.buttons & 1){ const dt = (drag.x - x) / W * (drag.t1 - drag.t0); if (Math.abs(drag.x - x) > 3) moved = true;
        t0 = drag.t0 + dt; t1 = drag.t1 + dt; paint(); return; }
      info.textContent = describe(at(x, y)) || "\u00a0"; });
    cv.addEventListener("mouseup", e => { const [x, y] = local(e); drag = null;
      if (!moved){ const h = at(x, y); if (h && h.marker) goTo(h.marker.code); } });
    cv.addEventListener("mouseleave", () => { drag = null; });
    cv.addEventListener("keydown", e => { const w = t1 - t0;
      if (e.key === "+" || e.key === "=") zoom(0.8); else if (e.key === "-") zoom(1.25);
      else if (e.key === "ArrowLeft"){ t0 -= w / 10; t1 -= w / 10; paint(); } else if (e.key === "ArrowRight"){ t0 += w / 10; t1 += w / 10; paint(); } });
    zin.addEventListener("click", () => zoom(0.5)); zout.addEventListener("click", () => zoom(2));
    fit.addEventListener("click", () => { t0 = 0; t1 = span; paint(); });
    if (med) med.addEventListener("click", () => show(crit.start_us, crit.end_us));
    if (typeof window !== "undefined") window.addEventListener("resize", () => { if (box.isConnected){ size(); paint(); } });
    size(); paint();
  }
  // The collective lanes of several ranks' timelines as one timeline, one lane per rank, each on its own clock
  // from its first recorded step (ranks' clocks are not synchronised; their steps start together). null with
  // fewer than two ranks. The steps drawn are the first rank's.
  draw.ranks = timelines => {
    const tls = arr(timelines).filter(t => t && arr(t.lanes).some(l => l && l.kind === "collective"));
    if (tls.length < 2) return null;
    const names = [], lanes = [];
    let total = 0, kept = 0;
    for (const t of tls){
      const off = names.length; names.push(...arr(t.names));
      for (const l of arr(t.lanes)) if (l && l.kind === "collective"){
        const evs = arr(l.events).filter(r => Array.isArray(r) && r.length === 6).map(r => [r[0], r[1], r[2] + off, r[3], r[4], r[5]]);
        lanes.push({id: l.id, kind: l.kind, label: l.label, depth: 1, total: l.total, events: evs});
        total += num(l.total) ? l.total : 0; kept += evs.length;
      }
    }
    return {kinds: tls[0].kinds, names, lanes, steps: tls[0].steps, span_us: Math.max(...tls.map(t => num(t.span_us) ? t.span_us : 0)),
            resolution_us: Math.max(...tls.map(t => num(t.resolution_us) ? t.resolution_us : 0)), events_total: total,
            events_kept: kept, markers: [], critical: []};
  };
  return draw;
})();
