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

from gpuprof.memory.htmlsafe import csp_hash, fill_template, page_policy
from gpuprof.render import web

__all__ = ["ENTRY_MODULE", "INDEX_HTML", "POLICY", "HEADER_POLICY", "SCRIPT_HASHES"]

# TensorBoard imports this module in its plugin frame (base href data/plugin/gpuprof/) and calls render():
# the frame moves on to our page, which then owns the whole frame and its policy.
ENTRY_MODULE = 'export async function render() { document.location.href = "index.html"; }\n'

# The tab's own stylesheet and script (gpuprof/render/web/tab.css, tab.js); the drawing (tables, cards, charts,
# findings, views) is gpuprof/render/web/report.js (GP.*), the same code as the standalone --html page, inlined first.
_TAB_STYLE = web.read("tab.css")
_TAB_SCRIPT = web.read("tab.js")

# One inline script (the shared drawing code, then the tab's) and one stylesheet: the policy allows them by hash.
_SCRIPT = web.SCRIPT + _TAB_SCRIPT
_STYLE = web.STYLE + _TAB_STYLE
SCRIPT_HASHES = [csp_hash(_SCRIPT)]
POLICY = page_policy([_SCRIPT], [_STYLE], connect="'self'", frames="'self'")
# The same policy as an HTTP header, less the Trusted Types directives: TensorBoard's response validator
# (tensorboard/backend/security_validator.py) accepts only 'self', 'none', https: and hashes as values and
# warns ("will become an error in 3.0") about require-trusted-types-for 'script'. The page's <meta> policy
# carries them; a browser enforces both policies, so the page gets all of it.
HEADER_POLICY = "; ".join(d for d in POLICY.split("; ") if not d.startswith(("require-trusted-types-for", "trusted-types")))

# The tab's document (gpuprof/render/web/tab.html): its policy, stylesheet and script filled in, in one pass.
INDEX_HTML = fill_template(web.read("tab.html"), {"POLICY": POLICY, "STYLE": _STYLE, "SCRIPT": _SCRIPT})

