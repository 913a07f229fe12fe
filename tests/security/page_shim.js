// Runs a gpuprof HTML page's script under a minimal DOM (Node, no browser): the page's own code, on its own data.
// Usage: node page_shim.js PAGE.html  -> prints a JSON summary of what the script built (texts, tags, attributes).
"use strict";
const fs = require("fs");
const html = fs.readFileSync(process.argv[2], "utf8");
const grab = re => { const m = html.match(re); if (!m) throw new Error("no match " + re); return m[1]; };
const dataText = grab(/<script id="data" type="application\/json">([\s\S]*?)<\/script>/);
const code = grab(/<script>([\s\S]*?)<\/script><\/body>/);
const created = [];
class Node_ { constructor(){ this.children = []; } append(...xs){ for (const x of xs) this.children.push(x instanceof Node_ ? x : new Text_(String(x))); }
  appendChild(x){ this.append(x); return x; } replaceChildren(...xs){ this.children = []; this.append(...xs); }
  get textContent(){ return this.children.map(c => c.textContent).join(""); } set textContent(v){ this.children = [new Text_(String(v))]; } }
class Text_ extends Node_ { constructor(t){ super(); this.t = t; } get textContent(){ return this.t; } }
class Element_ extends Node_ {
  constructor(tag, ns){ super(); this.tagName = ns ? tag : tag.toUpperCase(); this.ns = ns || null; this.attributes = {}; this.listeners = {}; this.dataset = {}; created.push(this); }
  setAttribute(k, v){ if (/^on/i.test(k) || k === "style" || k === "src" || k === "href") throw new Error("unsafe attribute " + k); this.attributes[k] = String(v); }
  addEventListener(k, f){ (this.listeners[k] = this.listeners[k] || []).push(f); }
  get rows(){ return this.children.filter(c => c.tagName === "TR"); }
  deleteRow(i){ const r = this.rows[i]; this.children.splice(this.children.indexOf(r), 1); }
  getContext(){ const ops = this.ops = []; return new Proxy({}, { get: (o, k) => k in o ? o[k] : (...a) => { ops.push(k); }, set: (o, k, v) => { o[k] = v; return true; } }); }
  get width(){ return +this.attributes.width; } get height(){ return +this.attributes.height; }
  set innerHTML(v){ throw new Error("innerHTML used"); }
}
const byId = {};
const body = new Element_("body");
for (const id of ["title", "sub", "main"]) { byId[id] = new Element_(id === "main" ? "main" : "div"); body.append(byId[id]); }
byId.data = { textContent: dataText };
global.Node = Node_;
global.document = { getElementById: id => byId[id], createElement: t => new Element_(t),
  createElementNS: (ns, t) => { if (ns !== "http://www.w3.org/2000/svg") throw new Error("namespace " + ns); return new Element_(t, ns); }, body };
new Function(code)();
const walk = (n, out) => { if (n instanceof Element_) out.push(n); for (const c of n.children) walk(c, out); return out; };
const els = walk(body, []);
const cells = els.filter(e => e.tagName === "TD").map(e => e.textContent);
const bars = els.filter(e => e.tagName === "rect" && e.attributes.class === "bar").length;
// every table with an id (the views' tables) and its body rows as first drawn
const drawn = els.filter(e => e.tagName === "TABLE" && e.attributes.id).map(t => [t.attributes.id, t.rows.length - 1]);
// click every header once: sorting must not throw; type into every search box
for (const th of els.filter(e => e.tagName === "TH")) for (const f of th.listeners.click || []) f();
for (const box of els.filter(e => e.tagName === "INPUT")) { box.value = "aten"; for (const f of box.listeners.input || []) f(); }
// after the search: the rows each searchable table still shows (its header row not counted)
const searched = els.filter(e => e.tagName === "TABLE" && e.attributes.id).map(t => [t.attributes.id, t.rows.length - 1]);
// the timeline (GP.timeline): its lane labels as drawn, the marker buttons, and what each canvas was asked to draw
const lanes = els.filter(e => /\bgp-tl-lane\b/.test(e.attributes.class || "")).map(e => e.textContent);
const marks = els.filter(e => /\bgp-tl-mark\b/.test(e.attributes.class || "")).map(e => e.textContent);
const canvas = els.filter(e => e.tagName === "CANVAS").map(e => (e.ops || []).filter(o => o === "fillRect").length);
// text nodes a value that was not text became ("null", "undefined", "NaN", "[object Object]"): never on a page
const texts = n => n instanceof Text_ ? [n.t] : n.children.flatMap(texts);
const strays = texts(body).filter(t => ["null", "undefined", "NaN", "[object Object]"].includes(t.trim()));
console.log(JSON.stringify({strays, lanes, marks, canvas, rendered: body.dataset.rendered, bars: body.dataset.bars, title: byId.title.textContent,
  h2: els.filter(e => e.tagName === "H2").map(e => e.textContent), h3: els.filter(e => e.tagName === "H3").map(e => e.textContent), cells, rects: bars, drawn, searched, li: els.filter(e => e.tagName === "LI").map(e => e.textContent),
  tags: [...new Set(els.map(e => e.tagName))].sort()}));
