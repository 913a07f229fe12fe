
const D = JSON.parse(document.getElementById("data").textContent);
const {el, short, fmtUs, fmtPct, table} = GP;
const $ = id => document.getElementById(id);
function section(title){ const s = el("section", {}, el("h2", {}, title)); $("main").append(s); return s; }
const COLORS = GP.PALETTE;

function renderReport(){
  const s = section("Summary");
  const total = D.findings_total === undefined ? D.findings.length : D.findings_total;
  s.append(el("div", {class: "cards"}, ...GP.cards(D.headline, total)));
  if (D.traces.length > 1) s.append(table([{head: "#", get: t => D.traces.indexOf(t), show: t => "#" + (D.traces.indexOf(t) + 1)},
    {head: "trace", name: true, get: t => t.path},
    {head: "device", name: true, get: t => t.devices.join(", ") || "-"}, {head: "steps", get: t => t.num_steps, show: t => String(t.num_steps)},
    {head: "step median", get: t => t.step_time_us, show: t => fmtUs(t.step_time_us)},
    {head: "step mean", get: t => t.step_time_mean_us, show: t => fmtUs(t.step_time_mean_us)},
    {head: "GPU utilisation", get: t => t.gpu_utilization, show: t => fmtPct(t.gpu_utilization)}], D.traces));
  const keys = [...new Set(D.traces.flatMap(t => Object.keys(t.breakdown_us)))];
  s.append(table([{head: "per step (mean)", name: true, get: k => k}, ...D.traces.map((t, i) => ({head: D.traces.length > 1 ? "#" + (i + 1) : "time",
    get: k => t.breakdown_us[k], show: k => fmtUs(t.breakdown_us[k])}))], keys));
  const colors = {}, labels = {}, bars = [];
  D.traces.forEach((t, i) => { const k = "#" + (i + 1); colors[k] = COLORS[i % COLORS.length]; labels[k] = k + " " + t.path;
    t.step_times_us.forEach((v, j) => bars.push({id: t.step_ids[j] === undefined ? j : t.step_ids[j], parts: {[k]: v}})); });
  if (D.job) GP.jobChart(section("Job: " + D.job.steps + " steps watched").appendChild(el("div", {id: "job-chart"})), D.job);
  GP.stepChart(section("Step time").appendChild(el("div", {id: "steps-chart"})), bars, colors, "step time per step", labels);
  // over several traces one card per distinct finding, labelled with its traces (the terminal's grouping)
  section("Findings (" + (total > D.findings.length ? D.findings.length + " distinct of " + total + " in " + D.traces.length + " traces"
    : D.findings.length) + ")").append(...GP.findings(D.findings));
  // each trace's recorded steps as lanes (GP.timeline, timeline.js): markers link to the finding cards above (one card
  // per distinct finding over several traces: a marker goes to its code's card)
  D.traces.forEach((t, i) => GP.timeline(section("Timeline" + (D.traces.length > 1 ? " of #" + (i + 1) + " " + short(t.path) : ""))
    .appendChild(el("div", {class: "gp-tl", id: "timeline" + (i ? "-" + (i + 1) : "")})), t.timeline, D.findings));
  const ranks = GP.timeline.ranks(D.traces.map(t => t.timeline));
  if (ranks) GP.timeline(section("Collectives per rank (each rank's clock from its first step)")
    .appendChild(el("div", {class: "gp-tl", id: "timeline-ranks"})), ranks, []);
  D.traces.forEach((t, i) => { const sec = section("Views" + (D.traces.length > 1 ? " of #" + (i + 1) + " " + short(t.path) : ""));
    GP.views(sec.appendChild(el("div", {class: "views"})), t.views, i ? "-" + (i + 1) : ""); });
}

// the diff document, drawn whole by the shared code (GP.diff), as the TensorBoard tab's comparison
function renderDiff(){ GP.diff(section("Comparison, before \u2192 after").appendChild(el("div", {id: "diff"})), D.diff); }

// gpuprof try's ranked table, the lines to change and what only the code can change (every string as text)
function renderTry(){
  const s = section("Variants, ranked");
  s.append(table(D.head.map((h, i) => ({head: h, name: i === 0 || i === D.head.length - 1, get: r => r[i]})), D.rows));
  if (D.analysis.length) section("From the baseline's analysis").append(...D.analysis.map(t => el("p", {}, t)));
  if (D.keep.length) section("To keep a faster variant, change").append(
    el("ul", {}, ...D.keep.map(k => el("li", {}, el("b", {}, k[0]), ": ", el("code", {}, k[1])))));
  if (D.code.length) section("Needs a code change (not tried; the saving is the finding's prediction)").append(
    el("ul", {}, ...D.code.map(c => el("li", {}, c))));
}

$("title").textContent = D.title;
$("sub").textContent = "gpuprof " + D.version + " \u00b7 offline page: nothing here loads from the network";
if (D.kind === "diff") renderDiff(); else if (D.kind === "try") renderTry(); else renderReport();
document.body.dataset.rendered = "1";
