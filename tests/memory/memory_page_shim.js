// Runs the memory page's script (gpuprof memory --html, the TensorBoard tab) under a minimal DOM in Node, no browser:
// prints the text of the category, stage, module and fixes tables the script built. Usage: node memory_page_shim.js PAGE.html
"use strict";
const fs = require("fs");
const html = fs.readFileSync(process.argv[2], "utf8");
const grab = re => { const m = html.match(re); if (!m) throw new Error("no match " + re); return m[1]; };
const dataText = grab(/<script id="data" type="application\/json">([\s\S]*?)<\/script>/);
const code = grab(/<script>([\s\S]*?)<\/script><\/body>/);
class Node_ { constructor(){ this.children = []; } append(...xs){ for (const x of xs) this.children.push(x instanceof Node_ ? x : new Text_(String(x))); }
  replaceChildren(...xs){ this.children = []; this.append(...xs); }
  get textContent(){ return this.children.map(c => c.textContent).join(""); } set textContent(v){ this.children = [new Text_(String(v))]; } }
class Text_ extends Node_ { constructor(t){ super(); this.t = t; } get textContent(){ return this.t; } }
class Element_ extends Node_ {
  constructor(tag){ super(); this.tagName = tag.toUpperCase(); this.attributes = {}; this.listeners = {}; this.dataset = {}; this.style = {}; }
  setAttribute(k, v){ if (/^on/i.test(k)) throw new Error("unsafe attribute " + k); this.attributes[k] = String(v); }
  addEventListener(k, f){ (this.listeners[k] = this.listeners[k] || []).push(f); }
  getContext(){ return new Proxy({}, { get: (o, k) => k in o ? o[k] : (...a) => {}, set: (o, k, v) => { o[k] = v; return true; } }); }
  getBoundingClientRect(){ return {left: 0, top: 0, width: 1100, height: 420}; }
  get width(){ return 1100; } get height(){ return 420; } set width(v){} set height(v){}
}
const byId = {};
const body = new Element_("body");
global.window = { addEventListener(){} };
global.document = { getElementById: id => { if (id === "data") return { textContent: dataText };
  if (!byId[id]) { byId[id] = new Element_(id === "c" ? "canvas" : "div"); body.append(byId[id]); } return byId[id]; },
  createElement: t => new Element_(t), body, addEventListener(){} };
new Function(code)();
const walk = (n, out) => { if (n instanceof Element_) out.push(n); for (const c of n.children) walk(c, out); return out; };
console.log(JSON.stringify({cats: byId.cats.textContent.slice(0, 400), stages: byId.stages.textContent.slice(0, 200),
  modules: byId.modules.textContent.slice(0, 200), fixes: byId.fixes.textContent.slice(0, 300)}));
