"""The tab's "Compare with" answer is ``gpuprof diff``'s: the ``compare`` route and ``gpuprof diff --format json``
on the real V100 ResNet-50 samples (num_workers 0 -> 4) hold the same findings, savings and changed rows.

The route is asked through werkzeug's test client, as TensorBoard would serve it; the CLI is run as a user
runs it. Both read the same trace files: the tab through its run views, the CLI through ``analyze``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof_testing.realtraces import v100_samples

pytest.importorskip("tensorboard")


def _route(root: Path, url: str) -> dict[str, Any]:
    from tensorboard.plugins.base_plugin import TBContext
    from werkzeug.test import Client

    from gpuprof.tbplugin.plugin import GpuprofPlugin

    plugin = GpuprofPlugin(TBContext(logdir=str(root)))
    apps = plugin.get_plugin_apps()
    c = Client(lambda environ, start_response: apps[environ["PATH_INFO"]](environ, start_response))
    for _ in range(3000):
        j: dict[str, Any] = json.loads(c.get(url).get_data(as_text=True))
        if j["status"] != "pending":
            return j
        time.sleep(0.02)
    raise AssertionError(f"{url} still pending after 60 s")


@pytest.fixture(scope="module")
def both() -> tuple[dict[str, Any], dict[str, Any]]:
    root = v100_samples()[0].parent.parent
    tab = _route(root, "/compare?a=resnet50_num_workers_0&b=resnet50_num_workers_4")
    assert tab["status"] == "ready", tab
    res = CliRunner().invoke(cli, ["diff", str(root / "resnet50_num_workers_0"), str(root / "resnet50_num_workers_4"),
                                   "--format", "json", "-j", "1"])
    assert res.exit_code == 0, res.output[-2000:]
    return tab["compare"], json.loads(res.output)


@pytest.mark.slow
def test_same_findings_removed_added_changed(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    tab, cli_doc = both
    assert (tab["before"], tab["after"]) == ("resnet50_num_workers_0", "resnet50_num_workers_4")
    d = tab["diff"]
    assert d["diff_schema_version"] == cli_doc["diff_schema_version"]
    for k in ("removed", "added", "changed", "unchanged"):  # whole rows: codes, locations, costs, messages
        assert d["findings"][k] == cli_doc["findings"][k], k
    gp102 = {r["code"]: r for r in d["findings"]["removed"]}["GP102"]  # the fix, named by both
    assert gp102["predicted_saving_us_per_step"] > 0 and gp102["measured_part"] == "breakdown.data_loading"
    assert 0.9 < gp102["measured_part_saving_us_per_step"] / gp102["predicted_saving_us_per_step"] < 1.0


@pytest.mark.slow
def test_same_predicted_and_measured_figures_and_step_metrics(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    tab, cli_doc = both
    d = tab["diff"]
    pick = ("code", "location", "predicted_saving_us_per_step", "measured_saving_us_per_step", "measured_part_saving_us_per_step")
    assert [[r[k] for k in pick] for r in d["findings"]["removed"]] == [[r[k] for k in pick] for r in cli_doc["findings"]["removed"]]
    assert d["metrics"] == cli_doc["metrics"]  # step time, every breakdown and idle part, noise
    for side in ("before", "after"):
        assert d[side]["step_times_us"] == cli_doc[side]["step_times_us"] and d[side]["steps"] == cli_doc[side]["steps"] == 12


@pytest.mark.slow
def test_same_changed_operators_and_kernels(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    tab, cli_doc = both
    d = tab["diff"]
    for kind in ("operators", "kernels"):
        for which in ("slower", "faster", "added", "removed", "within_noise"):
            assert d[kind][which] == cli_doc[kind][which], (kind, which)
    assert d["row_noise_us"] == cli_doc["row_noise_us"]
    # the fix moved operators (some beyond the noise, some within it): there is something to agree on
    assert d["operators"]["removed"] and d["operators"]["within_noise"]
