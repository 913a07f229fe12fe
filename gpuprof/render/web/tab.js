
const {el, short, num, fmtUs, fmtPct, fmtB} = GP;
const LONG = GP.LONG;
const BD_COLORS = {kernel: "#1a73e8", communication: "#9334e6", memcpy: "#e8710a", memset: "#f9ab00", runtime: "#d93025",
  data_loading: "#188038", cpu_exec: "#80868b", other: "#dadce0"};
const IDLE_COLORS = {sync: "#d93025", blocking_copy: "#e8710a", runtime: "#f9ab00", data_loading: "#188038",
  optimizer: "#9334e6", cpu_other: "#80868b"};
const state = {runs: [], run: null, view: null, trace: 0, compare: "", seq: 0, memSeq: 0, tlSeq: 0, rankSeq: 0};

function $(id){ return document.getElementById(id); }
function setStatus(text, isError){ const s = $("status"); s.textContent = text; s.setAttribute("class", isError ? "err" : "muted"); }
async function getJSON(url){ const r = await fetch(url, {credentials: "same-origin"}); const j = await r.json();
  if (!r.ok && j.status !== "missing") throw new Error("HTTP " + r.status); return j; }
function q(route, params){ return route + "?" + new URLSearchParams(params).toString(); }
function bump(){ document.body.dataset.rendered = String((+document.body.dataset.rendered || 0) + 1); }

// A fixed table in the box `id` (GP.table: sortable). A cell is its text, or [value to sort on, text].
function table(id, head, rows){
  const cell = (r, i) => Array.isArray(r[i]) ? r[i] : [r[i], r[i]];
  const cols = head.map((h, i) => ({head: h, name: i === 0, get: r => cell(r, i)[0], show: r => cell(r, i)[1]}));
  $(id).replaceChildren(GP.table(cols, rows));
  $(id).parentElement.hidden = rows.length === 0;
}
const U = x => [x, fmtUs(x)], P = x => [x, fmtPct(x)], N = x => [x, String(x)], B = x => [x, fmtB(x)];

function showSummary(v){
  const cards = GP.cards(v.headline, v.findings.length);
  if (v.capture) cards.push(GP.card("capture: steps run", String(v.capture.steps)),
                            GP.card("capture: data loading", fmtPct(v.capture.data_loading_share)));
  $("cards").replaceChildren(...cards);
  const errs = v.errors.map(e => el("li", {}, short(e, LONG)));
  if (v.failed_rules.length) errs.unshift(el("li", {}, "rules that failed (a gpuprof bug; their findings are unknown, the analysis is incomplete): " + v.failed_rules.join(", ")));
  $("errors").replaceChildren(...errs); $("errors").hidden = errs.length === 0;
}

function showJob(v){
  $("job").hidden = !v.job;
  if (v.job) GP.jobChart($("job-chart"), v.job); else $("job-chart").replaceChildren();
}

function showFindings(v){
  $("findings").replaceChildren(...GP.findings(v.findings, v.failed_rules.length ? "No findings from the rules that ran (some failed: see above)." : "No findings."));
}

function showTrace(v){
  const sel = $("trace");
  sel.replaceChildren(...v.traces.map((t, i) => el("option", {value: i}, short(t.file) + (t.summary.rank !== null && t.summary.rank !== undefined ? " (rank " + t.summary.rank + ")" : ""))));
  sel.parentElement.hidden = v.traces.length < 2;
  state.trace = Math.min(state.trace, Math.max(v.traces.length - 1, 0)); sel.value = String(state.trace);
  const t = v.traces[state.trace];
  if (!t){ for (const id of ["steps-chart", "idle-chart", "views"]) $(id).replaceChildren(el("p", {class: "muted"}, "No trace analysed in this run.")); showTimeline(); return; }
  const s = t.summary;
  GP.stepChart($("steps-chart"), t.steps.map(x => ({id: x.id, parts: x.breakdown_us})), BD_COLORS, "step time per step");
  if (s.has_gpu_activity) GP.stepChart($("idle-chart"), t.steps.map(x => ({id: x.id, parts: x.idle_us})), IDLE_COLORS, "GPU idle time per step");
  else $("idle-chart").replaceChildren(el("p", {class: "muted"}, "This trace has no GPU activity (a CPU run), so there is no GPU idle time to break down."));
  table("kernels", ["kernel", "launches", "total", "mean", "share of GPU"], s.top_kernels.map(k => [short(k.name), N(k.count), U(k.total_us), U(k.mean_us), P(k.share_of_gpu)]));
  table("ops", ["operator", "calls", "host total", "host self", "GPU self", "GPU total"], s.top_ops.map(o => [short(o.name), N(o.count), U(o.total_us), U(o.self_us), U(o.gpu_us), U(o.gpu_total_us)]));
  table("copies", ["direction", "memory", "count", "bytes", "GPU time", "bandwidth"], s.copies.map(c => [short(c.direction), short(c.memory), N(c.count), B(c.bytes), U(c.total_us), [c.bandwidth_gbps, num(c.bandwidth_gbps) ? c.bandwidth_gbps.toFixed(1) + " GB/s" : "-"]]));
  table("syncs", ["cause", "runtime call", "count", "blocked", "where"], s.syncs.map(x => [short(x.cause), short(x.runtime), N(x.count), U(x.total_us), x.location ? short(x.location) : "-"]));
  $("no-gpu-tables").hidden = s.top_kernels.length + s.copies.length + s.syncs.length > 0;
  // the report's views of this trace, whole (every row the report keeps), sortable and searchable
  GP.views($("views"), s.views);
  showTimeline();
}

// The timelines are not in the run answer (a few hundred kB each; gpuprof/tbplugin/timelines.py): each trace has a
// timeline_ref, and its timeline is fetched when its section is open, polled like the run while the analysis runs.
// The ones fetched for the view on screen are kept (a few), so going back to a trace draws it at once.
const tlCache = new Map();
async function poll(url, stale){
  for (;;){
    const j = await getJSON(url);
    if (stale()) return null;
    if (j.status !== "pending") return j;
    await new Promise(r => setTimeout(r, 500));
  }
}
async function fetched(url, seqKey, status){
  const seq = ++state[seqKey], run = state.seq;
  status.textContent = "loading\u2026";
  let j; try { j = await poll(url, () => seq !== state[seqKey] || run !== state.seq); }
  catch (e) { if (seq === state[seqKey]) status.textContent = "could not load the timeline: " + e.message; return null; }
  if (!j) return null;
  status.textContent = j.status === "ready" ? "" : short(j.error || j.status, LONG);
  return j.status === "ready" ? j : null;
}

// The selected trace's recorded steps as lanes (GP.timeline, the --html page's code): markers for its findings
async function showTimeline(){
  const v = state.view, t = v && v.traces[state.trace], box = $("timeline"), ref = t && t.timeline_ref;
  $("timeline-size").textContent = ref ? "(" + ref.lanes + " lanes, " + ref.events_kept + " boxes)" : "";
  if (!$("timeline-open").open){ state.tlSeq++; box.replaceChildren(); $("timeline-status").textContent = ""; return; }
  const findings = t ? v.findings.filter(f => !f.trace || f.trace === t.file) : [];
  const key = ref ? ref.trace : null;
  if (!ref || tlCache.has(key)){ state.tlSeq++; $("timeline-status").textContent = ""; GP.timeline(box, ref ? tlCache.get(key) : null, findings); bump(); return; }
  box.replaceChildren();
  const j = await fetched(q("timeline", {run: state.run, trace: ref.trace}), "tlSeq", $("timeline-status"));
  if (!j) return;
  tlCache.set(key, j.timeline); if (tlCache.size > 8) tlCache.delete(tlCache.keys().next().value);
  GP.timeline(box, j.timeline, findings); bump();
}

// Several ranks: their collectives one above the other (GP.timeline.ranks), from each trace's collective lanes only
async function showRankTimelines(){
  const v = state.view, box = $("timeline-ranks");
  const n = v ? v.traces.filter(x => x.timeline_ref && x.timeline_ref.collectives).length : 0;
  $("timeline-ranks-section").hidden = n < 2;
  if (n < 2 || !$("timeline-ranks-open").open){ state.rankSeq++; box.replaceChildren(); $("timeline-ranks-status").textContent = ""; return; }
  box.replaceChildren();
  const j = await fetched(q("timeline_ranks", {run: state.run}), "rankSeq", $("timeline-ranks-status"));
  if (!j) return;
  const ranks = GP.timeline.ranks(j.timelines);
  if (ranks) GP.timeline(box, ranks, []); else $("timeline-ranks-status").textContent = "fewer than two ranks with collectives";
  bump();
}

// With a cross-rank section the rows carry its numbers (gpuprof.tbplugin.data._ranks): the wait in collectives
// and the straggler, never "vs fastest", which names the rank that waits as the slow one.
function showRanks(v){
  const cross = v.ranks.some(r => "wait_us" in r);
  table("ranks", ["rank", "traces", "steps", "median step", cross ? "waits for others / step" : "vs fastest", "GPU utilisation", "GPU idle / step", "findings", "report"],
    v.ranks.map(r => [[r.rank, String(r.rank) + (r.straggler ? " (straggler)" : "")], N(r.traces), N(r.steps), U(r.step_time_us),
                      cross ? U(r.wait_us) : [r.vs_fastest, num(r.vs_fastest) ? "+" + fmtPct(r.vs_fastest) : "-"],
                      P(r.gpu_utilization), U(r.idle_us), N(r.findings), r.report ? short(r.report) : "-"]));
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
  $("xstraggler").setAttribute("class", x.stragglers.length ? "straggler" : "muted");
  const slow = new Set(x.stragglers);
  table("xranks", ["rank", "step", "compute", "comm", "exposed comm", "wait", "data loading", "host", "sync", "unrecorded", "collectives / step", "device"],
    x.ranks.map(r => [[r.rank, String(r.rank) + (slow.has(r.rank) ? " (straggler)" : "")], U(r.step_us), U(r.compute_us), U(r.comm_us),
                      U(r.exposed_comm_us), U(r.wait_us), U(r.data_loading_us), U(r.host_us), U(r.sync_us),
                      U(r.unrecorded_us), [r.collectives_per_step, num(r.collectives_per_step) ? r.collectives_per_step.toFixed(1) : "-"], short(r.device || "", 60)]));
  table("xcolls", ["collective", "per step", "mean time", "mean size", "bytes / step", "bus bandwidth"],
    x.collectives.map(c => [short(c.type, 40), [c.per_step, num(c.per_step) ? c.per_step.toFixed(1) : "-"], U(c.mean_us), B(c.mean_bytes),
                            B(c.bytes_per_step), [c.bus_gbps, num(c.bus_gbps) ? c.bus_gbps.toFixed(1) + " GB/s" : "-"]]));
  // the job's critical path (docs/critical-path.md): its parts, each on the rank it ran on
  const cp = x.critical_path;
  $("xpathhead").textContent = cp ? fmtUs(cp.length_us) + " per step over " + cp.steps + " steps; time on it: " +
    cp.ranks.slice(0, 4).map(r => "rank " + r.rank + " " + fmtUs(r.us)).join(", ") : "";
  table("xpath", ["kind", "name", "rank", "per step", "of the step"], cp ? cp.parts.map(p => [short(p.kind, 20), short(p.name),
    [p.rank === null ? -1 : p.rank, p.rank === null ? "-" : String(p.rank)], U(p.us), P(cp.length_us > 0 ? p.us / cp.length_us : null)]) : []);
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
  tlCache.clear();  // a new answer: the traces may have been analysed again
  showSummary(v); showJob(v); showFindings(v); showTrace(v); showRanks(v); showCrossRank(v); showMemory(v); showNotes(v);
  showRankTimelines();
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

async function loadCompare(){
  const other = state.compare, box = $("compare-body"); if (!other){ box.replaceChildren(); return; }
  const seq = state.seq;
  for (;;){
    let j; try { j = await getJSON(q("compare", {a: other, b: state.run})); }
    catch (e) { box.replaceChildren(el("p", {class: "err"}, "could not compare: " + e.message)); return; }
    if (seq !== state.seq || other !== state.compare) return;
    if (j.status === "pending"){ box.replaceChildren(el("p", {class: "muted"}, "analysing\u2026 " + j.done + " of " + j.total + " traces")); await new Promise(r => setTimeout(r, 500)); continue; }
    if (j.status !== "ready"){ box.replaceChildren(el("p", {class: "err"}, short(j.error || j.status, LONG))); return; }
    // `gpuprof diff`'s document of the two runs, drawn by the code of `gpuprof diff --html` (GP.diff)
    GP.diff(box, j.compare.diff, "compare-");
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
  $("timeline-open").addEventListener("toggle", showTimeline);
  $("timeline-ranks-open").addEventListener("toggle", showRankTimelines);
  loadRun(j.runs[0].name);
}
init();
