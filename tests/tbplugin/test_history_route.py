"""The TensorBoard tab's History frame: ``history.html`` is ``gpuprof history LOGDIR --html``'s page."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorboard")


def _client(logdir: Path) -> Any:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    apps = GpuprofPlugin(TBContext(logdir=str(logdir))).get_plugin_apps()
    return Client(lambda environ, start_response: apps[environ["PATH_INFO"]](environ, start_response))


def test_history_page_of_the_logdir(tmp_path: Path) -> None:
    from gpuprof.history.html import history_page
    from gpuprof.history.render import history_dict
    from gpuprof.history.runs import read_history
    from gpuprof.tbplugin import page

    c = _client(tmp_path)
    assert c.get("/history.html").status_code == 404  # no report yet: a plain answer, not an error page
    for i, (name, step) in enumerate([("a", 100.0), ("b<script>", 101.0)]):
        d = tmp_path / name
        d.mkdir()
        doc = {"schema_version": "1.2", "inputs": [], "sections": [], "notes": [], "findings": [],
               "traces": [{"path": "t", "num_steps": 3, "step_time_us": step, "step_time_mean_us": step, "gpu_busy_us": 0.0,
                           "gpu_utilization": None, "breakdown_us": {}, "idle_breakdown_us": {}}]}
        (d / "report.json").write_text(json.dumps(doc))
        os.utime(d / "report.json", (1_700_000_000 + i, 1_700_000_000 + i))
    res = c.get("/history.html")
    body = res.get_data(as_text=True)
    assert res.status_code == 200 and res.mimetype == "text/html"
    assert body == history_page(history_dict(read_history(str(tmp_path))))  # the CLI's page, byte for byte
    assert "<script" not in body and "b&lt;script&gt;" in body
    assert 'src="history.html"' in page.INDEX_HTML and 'sandbox=""' in page.INDEX_HTML
