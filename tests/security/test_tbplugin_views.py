"""The TensorBoard tab's views (operators, kernels, ...) with hostile operator and kernel names.

The ``run`` route carries every view row of the trace; the names travel as
escaped JSON (no ``<``, ``>``, ``&``, pure ASCII) and come back byte-exact
through ``JSON.parse``; the tab's page never holds data (it fetches it), and its
policy allows only its own script, which is the shared drawing code
(gpuprof/render/web/report.js) followed by the tab's. The drawing itself, in
headless Chromium: tests/tbplugin/test_browser.py (hostile run, views sorted
and searched, nothing runs).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

pytest.importorskip("tensorboard")
CORPUS = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]


def _client(logdir: Path) -> Any:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    apps = GpuprofPlugin(TBContext(logdir=str(logdir))).get_plugin_apps()
    return Client(lambda env, sr: apps[env["PATH_INFO"]](env, sr))


def test_hostile_operator_and_kernel_names_reach_the_tab_as_inert_json(tmp_path: Path) -> None:
    b = TraceBuilder(device="NVIDIA H100 80GB HBM3", cc=(9, 0))
    for _ in range(2):
        with b.step():
            for i, name in enumerate(CORPUS):
                with b.op(name, input_types=["float"]):
                    b.kernel(name, us=200 + 10 * i)
            b.cpu(us=100)
    b.write(tmp_path / "run" / "w.pt.trace.json")
    c = _client(tmp_path)
    for _ in range(1500):
        r = c.get("/run?run=run")
        raw = r.get_data(as_text=True)
        if json.loads(raw)["status"] != "pending":
            break
        time.sleep(0.02)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    assert raw.isascii() and not set("<>&\u2028\u2029") & set(raw)  # nothing the HTML parser reacts to
    views = json.loads(raw)["view"]["traces"][0]["summary"]["views"]
    assert {k["name"] for k in views["kernels"]} == set(CORPUS)  # every name, whole and exact
    assert {o["name"] for o in views["operators"]} >= set(CORPUS)
    page = c.get("/index.html")
    html = page.get_data(as_text=True)
    for name in HTML_HOSTILE:  # the page holds no data: names arrive only through the JSON routes
        assert name not in html
    from gpuprof.render import web
    from gpuprof.tbplugin import page as tab

    assert web.SCRIPT in html and tab.SCRIPT_HASHES[0] in page.headers["Content-Security-Policy"]
    code = "\n".join(line for line in web.SCRIPT.splitlines() if not line.lstrip().startswith("//"))
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(", "setTimeout(\""):
        assert sink not in code  # markup or code from a string: none in the shared drawing code
