
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const cv = document.getElementById("c"), ctx = cv.getContext("2d"), tip = document.getElementById("tip");
const M = {l: 70, r: 10, t: 10, b: 28};
const SHORT = 300, LONG = 1000;  // characters of a name / of a message shown; a longer one is cut with a count
let dev = null, view = null, drag = null;
function fmtB(n){ if(n===null||n===undefined) return "?"; const u=["B","KiB","MiB","GiB","TiB"]; let i=0, v=Math.abs(n);
  while(v>=1024&&i<u.length-1){v/=1024;i++;} return (n<0?"-":"")+(i?v.toFixed(2):Math.round(v))+" "+u[i]; }
function short(s, n = SHORT){ s = String(s); return s.length > n ? s.slice(0, n) + "\u2026 (" + (s.length - n) + " more characters)" : s; }
// An element with fixed attribute names; children are strings (become Text nodes) or elements.
function el(tag, attrs, ...kids){ const e = document.createElement(tag);
  for (const k of Object.keys(attrs || {})) e.setAttribute(k, String(attrs[k]));
  e.append(...kids); return e; }
// <pure>: functions of numbers only (tests run them in node)
// Axis values at round numbers: the 1, 2 or 5 times a power of ten nearest to raw (a fifth of the
// range), in the byte unit the top value is read in.
function niceStep(raw){ const p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p; }
const UNITS = [["B", 1], ["KiB", 1024], ["MiB", 1048576], ["GiB", 1073741824], ["TiB", 1099511627776]];
function byteTicks(max){ let i = 0; while (i < UNITS.length - 1 && max >= UNITS[i + 1][1]) i++;
  const u = UNITS[i][1], step = Math.max(niceStep(max / u / 5), i ? 0 : 1) * u, out = [];
  for (let k = 0; k * step <= max * (1 + 1e-9); k++) out.push({v: k * step, label: +(k * step / u).toFixed(3) + " " + UNITS[i][0]});
  return out; }
function timeTicks(a, b){ const step = niceStep(Math.max(b - a, 1e-9) / 5), dec = Math.max(0, -Math.floor(Math.log10(step))), out = [];
  for (let t = Math.ceil(a / step - 1e-9) * step; t <= b + step * 1e-9; t += step) out.push({v: t, label: t.toFixed(dec)});
  return out; }
// What is drawn over the bands: the device's capacity and each out-of-memory event, with their labels.
function overlays(d, fmt){ const out = [];
  if (d.total_memory) out.push({kind: "capacity", v: d.total_memory, label: "device capacity " + fmt(d.total_memory)});
  for (const o of d.ooms || []) out.push({kind: "oom", t: o.t, label: "OOM: " + fmt(o.requested) + " requested"});
  return out; }
// </pure>
function swatch(color){ const i = el("i"); i.style.background = color; return i; }
function ymax(){ let m = 1; for (let i = 0; i < dev.t.length; i++){ if (dev.t[i] < view[0] || dev.t[i] > view[1]) continue;
  m = Math.max(m, dev.allocated[i] || 0, dev.reserved[i] || 0); }
  for (const o of dev.ooms || []) if (o.t >= view[0] && o.t <= view[1]) m = Math.max(m, o.requested);
  return m * 1.05; }
function X(t){ return M.l + (t - view[0]) / Math.max(view[1] - view[0], 1e-12) * (cv.width - M.l - M.r); }
function T(x){ return view[0] + (x - M.l) / (cv.width - M.l - M.r) * (view[1] - view[0]); }
function draw(){
  const W = cv.width, H = cv.height, ym = ymax(), Y = v => H - M.b - v / ym * (H - M.t - M.b);
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, W, H);
  const yt = byteTicks(ym);
  for (const k of yt){ ctx.strokeStyle = "#eee"; ctx.beginPath(); ctx.moveTo(M.l, Y(k.v)); ctx.lineTo(W - M.r, Y(k.v)); ctx.stroke(); }
  const idx = []; for (let i = 0; i < dev.t.length; i++) if (dev.t[i] >= view[0] && dev.t[i] <= view[1]) idx.push(i);
  if (idx.length === 1) idx.push(idx[0]);
  const ns = dev.slots.length, base = new Float64Array(idx.length);
  for (let s = 0; s < ns && idx.length; s++){
    ctx.fillStyle = dev.slots[s].color; ctx.beginPath();
    const top = [];
    idx.forEach((i, k) => { const v = base[k] + (dev.series[i][s] || 0); top.push(v); });
    // Steps, not slopes: memory keeps its value until the next bucket.
    const xe = k => k + 1 < idx.length ? X(dev.t[idx[k + 1]]) : X(dev.t[idx[k]]) + 1;
    ctx.moveTo(X(dev.t[idx[0]]), Y(base[0]));
    idx.forEach((i, k) => { ctx.lineTo(X(dev.t[i]), Y(top[k])); ctx.lineTo(xe(k), Y(top[k])); });
    for (let k = idx.length - 1; k >= 0; k--) { ctx.lineTo(xe(k), Y(base[k])); ctx.lineTo(X(dev.t[idx[k]]), Y(base[k])); }
    ctx.closePath(); ctx.fill();
    top.forEach((v, k) => base[k] = v);
  }
  const line = (arr, color, dash) => { ctx.strokeStyle = color; ctx.setLineDash(dash); ctx.lineWidth = 1.5; ctx.beginPath();
    let on = false, py = 0; idx.forEach(i => { const v = arr[i]; if (v === null || v === undefined) { on = false; return; }
      if (!on) { ctx.moveTo(X(dev.t[i]), Y(v)); on = true; } else { ctx.lineTo(X(dev.t[i]), py); ctx.lineTo(X(dev.t[i]), Y(v)); } py = Y(v); });
    ctx.stroke(); ctx.setLineDash([]); };
  line(dev.allocated, "#000", []); line(dev.reserved, "#c00", [6, 3]);
  ctx.font = "11px sans-serif";
  for (const o of overlays(dev, fmtB)){
    if (o.kind === "capacity" && o.v < ym){ ctx.strokeStyle = "#777"; ctx.setLineDash([2, 2]); ctx.beginPath();
      ctx.moveTo(M.l, Y(o.v)); ctx.lineTo(W - M.r, Y(o.v)); ctx.stroke(); ctx.setLineDash([]);
      ctx.fillStyle = "#555"; ctx.textAlign = "right"; ctx.fillText(o.label, W - M.r - 4, Y(o.v) - 4); }
    if (o.kind === "oom" && o.t >= view[0] && o.t <= view[1]){ ctx.strokeStyle = "#d00"; ctx.lineWidth = 2; ctx.beginPath();
      ctx.moveTo(X(o.t), M.t); ctx.lineTo(X(o.t), H - M.b); ctx.stroke(); ctx.lineWidth = 1;
      ctx.fillStyle = "#d00"; ctx.textAlign = X(o.t) > W / 2 ? "right" : "left";
      ctx.fillText(o.label, X(o.t) + (X(o.t) > W / 2 ? -4 : 4), M.t + 12); }
  }
  ctx.fillStyle = "#333"; ctx.textAlign = "right";
  for (const k of yt) ctx.fillText(k.label, M.l - 4, Y(k.v) + 4);
  ctx.textAlign = "center";
  if (dev.time_unit === "s") for (const k of timeTicks(view[0], view[1])) ctx.fillText(k.label + " s", X(k.v), H - 8);
  else for (const k of timeTicks(view[0], view[1])) if (Number.isInteger(Math.round(k.v * 1e6) / 1e6)) ctx.fillText("#" + Math.round(k.v), X(k.v), H - 8);
  if (drag && drag.x1 !== undefined){ ctx.fillStyle = "rgba(0,100,255,.15)"; ctx.fillRect(Math.min(drag.x0, drag.x1), M.t, Math.abs(drag.x1 - drag.x0), H - M.t - M.b); }
  document.body.dataset.rendered = String((+document.body.dataset.rendered || 0) + 1);
}
function nearest(t){ let lo = 0, hi = dev.t.length - 1; while (lo < hi){ const m = (lo + hi) >> 1; if (dev.t[m] < t) lo = m + 1; else hi = m; }
  if (lo > 0 && Math.abs(dev.t[lo - 1] - t) < Math.abs(dev.t[lo] - t)) lo--; return lo; }
function hover(ev){
  const r = cv.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
  if (drag){ drag.x1 = x; draw(); return; }
  if (x < M.l || x > cv.width - M.r || !dev.t.length){ tip.style.display = "none"; return; }
  const i = nearest(T(x)), ym = ymax(), v = (cv.height - M.b - y) / (cv.height - M.t - M.b) * ym;
  let acc = 0, hit = -1; for (let s = 0; s < dev.slots.length; s++){ acc += dev.series[i][s] || 0; if (v <= acc){ hit = s; break; } }
  let txt = (dev.time_unit === "s" ? "t = " + Number(dev.t[i]).toFixed(6) + " s" : "event #" + dev.t[i]) +
    "\nallocated " + fmtB(dev.allocated[i]) + "   reserved " + fmtB(dev.reserved[i]);
  if (hit >= 0){ const sl = dev.slots[hit]; txt += "\n\n" + short(sl.label) + ": " + fmtB(dev.series[i][hit]);
    if (sl.stack.length) txt += "\n  " + sl.stack.slice(0, 16).map(s => short(s)).join("\n  "); }
  tip.textContent = txt; tip.style.display = "block";
  tip.style.left = Math.min(x + 14, cv.width - 300) + "px"; tip.style.top = (y + 14) + "px";
}
cv.addEventListener("mousemove", hover);
cv.addEventListener("mouseleave", () => { tip.style.display = "none"; });
cv.addEventListener("mousedown", ev => { const r = cv.getBoundingClientRect(); drag = {x0: ev.clientX - r.left}; });
window.addEventListener("mouseup", () => { if (!dev) return; if (drag && drag.x1 !== undefined && Math.abs(drag.x1 - drag.x0) > 4){
  const a = T(Math.min(drag.x0, drag.x1)), b = T(Math.max(drag.x0, drag.x1)); view = [a, b]; } drag = null; draw(); });
cv.addEventListener("dblclick", () => { if (dev) { reset(); draw(); } });
cv.addEventListener("wheel", ev => { if (!dev) return; ev.preventDefault(); const r = cv.getBoundingClientRect(), t = T(ev.clientX - r.left);
  const f = ev.deltaY < 0 ? 0.8 : 1.25; view = [t - (t - view[0]) * f, t + (view[1] - t) * f]; draw(); }, {passive: false});
function reset(){ const t = dev.t; view = t.length ? [t[0], t[t.length - 1] > t[0] ? t[t.length - 1] : t[0] + 1] : [0, 1]; }
function legend(){
  const spans = dev.slots.map(s => el("span", {title: s.label}, swatch(s.color), short(s.label)));
  spans.push(el("span", {}, swatch("#000"), "allocated"), el("span", {}, swatch("#c00"), "reserved"));
  if (dev.total_memory) spans.push(el("span", {}, swatch("#777"), "device capacity " + fmtB(dev.total_memory)));
  if ((dev.ooms || []).length) spans.push(el("span", {}, swatch("#d00"), "out of memory (failed allocation)"));
  document.getElementById("legend").replaceChildren(...spans);
}
function holders(){
  const rows = [el("tr", {}, el("th", {}, "site"), el("th", {}, "bytes"), el("th", {}, "blocks"), el("th", {}, "share"))];
  for (const r of dev.top) rows.push(el("tr", {title: (r.stack || []).slice(0, 16).map(s => short(s)).join("\n")},
    el("td", {}, short(r.site)), el("td", {}, fmtB(r.bytes)), el("td", {}, String(r.blocks)),
    el("td", {}, r.share === null || r.share === undefined ? "-" : (100 * r.share).toFixed(0) + "%")));
  document.getElementById("top").replaceChildren(...rows);
}
const SEGCOLOR = ["#4e79a7", "#e8e8e8", "#f28e2b", "#bab0ac"], SEGWORD = ["allocated", "free (cached)", "freed, waiting on another stream", "more blocks"];
function segments(){
  const box = document.getElementById("segs"), wrap = document.getElementById("wrap");
  if (!dev.no_history){ box.replaceChildren(); wrap.style.display = ""; return false; }
  wrap.style.display = "none";
  const big = Math.max(1, ...dev.segments.map(g => g.size));
  const rows = dev.segments.map(g => { const bar = el("div", {class: "seg"}); bar.style.width = (100 * g.size / big).toFixed(2) + "%";
    for (const [size, st] of g.blocks){ const b = el("span", {title: fmtB(size) + " " + SEGWORD[st]}); b.style.width = (100 * size / g.size).toFixed(3) + "%";
      b.style.background = SEGCOLOR[st]; bar.append(b); }
    return el("div", {class: "segrow"}, el("code", {}, fmtB(g.size)), bar); });
  const key = SEGWORD.map((w, i) => el("span", {}, swatch(SEGCOLOR[i]), w));
  box.replaceChildren(el("p", {class: "notes"}, (dev.events ? "Only one allocation event was recorded, too few for a timeline" :
    "No allocation history was recorded (torch.cuda.memory._record_memory_history() was not on), so there is no timeline") +
    ": these are the allocator's segments at snapshot time, largest first (" +
    dev.segments.length + " shown), each split into its blocks."), el("div", {id: "legend2"}, ...key), ...rows);
  document.body.dataset.rendered = String((+document.body.dataset.rendered || 0) + 1);
  return true;
}
const CATS = ["parameters", "gradients", "optimizer_state", "activations", "temporaries", "library_workspaces", "allocator_cache", "non_pytorch", "unattributed"];
function kinds(){
  const c = dev.categories || {}, peak = c.peak || {}, now = c.now || {}, rows = [];
  if (c.now){ rows.push(el("tr", {}, el("th", {}, "category"), el("th", {}, "at the peak"), el("th", {}, "at the end")));
    for (const k of CATS) if (peak[k] || now[k]) rows.push(el("tr", {}, el("td", {}, k.replace(/_/g, " ")),
      el("td", {}, peak[k] === null || peak[k] === undefined ? "-" : fmtB(peak[k])), el("td", {}, now[k] === null || now[k] === undefined ? "-" : fmtB(now[k]))));
    rows.push(el("tr", {}, el("td", {}, "= reserved by PyTorch"), el("td", {}, fmtB(c.peak_reserved)), el("td", {}, fmtB(c.now_reserved)))); }
  document.getElementById("cats").replaceChildren(...rows);
  const table = (id, key, list) => { const r = [el("tr", {}, el("th", {}, key), el("th", {}, "bytes"), el("th", {}, "share"))];
    for (const x of list) r.push(el("tr", {}, el("td", {}, short(x[key])), el("td", {}, fmtB(x.bytes)),
      el("td", {}, x.share === null || x.share === undefined ? "-" : (100 * x.share).toFixed(0) + "%")));
    document.getElementById(id).replaceChildren(...(list.length ? r : [])); };
  table("stages", "stage", dev.stages || []); table("modules", "module", dev.modules || []);
  const fx = (dev.fixes || []).map(f => el("li", {}, short(f.what, LONG) + ": saves " + fmtB(f.saves)));
  document.getElementById("fixes").replaceChildren(...(fx.length ? [el("h2", {}, "Fixes ranked by the bytes each saves"), el("ol", {}, ...fx)] : []));
}
function show(k){
  dev = DATA.devices[k]; reset(); if (!segments()) { draw(); legend(); } else document.getElementById("legend").replaceChildren(); holders(); kinds();
  window.gpuprofSeries = dev.slots.map(s => s.label);
}
function header(){
  document.getElementById("title").textContent = short(DATA.title);
  document.getElementById("sum").textContent = DATA.devices.map(d => short(d.device) + ": peak allocated " + fmtB(d.peak_allocated) +
    ", peak reserved " + fmtB(d.peak_reserved) + ", " + Number(d.events).toLocaleString("en-US") + " events").join(" \u00b7 ");
  const items = DATA.findings.map(f => el("li", {class: f.severity}, el("b", {}, short(f.code)), " ", short(f.message, LONG)));
  document.getElementById("findings").replaceChildren(items.length ? el("ul", {}, ...items) : el("p", {}, "No findings."));
  document.getElementById("notes").replaceChildren(...DATA.notes.map(n => el("li", {}, short(n, LONG))));
}
header();
const sel = document.getElementById("dev");
sel.replaceChildren(...DATA.devices.map((d, k) => el("option", {value: k}, short(d.device))));
sel.addEventListener("change", () => show(+sel.value));
// Start on the device with the highest peak (a GPU trace also has a small "cpu" device).
let first = 0; DATA.devices.forEach((d, k) => { if ((d.peak_allocated || 0) > (DATA.devices[first].peak_allocated || 0)) first = k; });
sel.value = String(first);
if (DATA.devices.length) show(first);
