"""GP601's measured cores read back (a saved report's evidence, written by hand or by an attacker): the loader fix's
what-if never exceeds the loading, never goes below 0, never raises, and a value that is not a finite number at or
above 0 is no measurement (issue 46 item 7; docs/security-tests.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gpuprof.codes import apply_overlaps
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.rules.replayed import with_what_if
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.tracegen import TraceBuilder

HOSTILE: list[Any] = [math.nan, math.inf, -math.inf, -1.0, True, "1", None, [1.0], {"a": 1}, 10**400, 1e308,
                      -0.0, 2**63]


@pytest.fixture(scope="module")
def gp102(tmp_path_factory: pytest.TempPathFactory) -> Finding:
    b = TraceBuilder(device=None)
    for _ in range(3):
        with b.step():
            b.dataloader(ms=3.0)
            b.cpu(us=2000, name="aten::addmm")
    path = b.write(Path(tmp_path_factory.mktemp("t")) / "t.pt.trace.json")
    m = compute_metrics(load_trace(str(path)))
    (f,) = with_what_if(m, [Finding("GP102", "x", Severity.WARNING, "m", "a", cost_us_per_step=3000.0)])
    return f


@pytest.mark.parametrize("bad", HOSTILE, ids=[f"v{i}" for i in range(len(HOSTILE))])
@pytest.mark.parametrize("key", ["trainer_cpu_cores", "idle_cores", "cores_measured_s"])
def test_hostile_measured_cores_never_promise_more_than_the_loading(gp102: Finding, key: str, bad: Any) -> None:
    extra: dict[str, Any] = {"num_workers": 0, "cores": 2, "trainer_cpu_cores": 1.0, "idle_cores": 1.0,
                             "cores_measured_s": 30.0, key: bad}
    gp601 = Finding("GP601", "dataloader-main-process", Severity.WARNING, "m", "a", cost_us_per_step=3000.0,
                    cost_share=0.6, origin="runtime",
                    evidence=(Evidence("data_loading_share", 0.6, 0.3, "fraction", extra=extra),))
    (w,) = [f for f in apply_overlaps([gp102, gp601]) if f.code == "GP601"]
    wait = next(e.value for e in gp102.evidence if e.metric == "loader_wait_us")
    assert isinstance(wait, float)
    saving = w.what_if_saving_us
    assert saving is not None and math.isfinite(saving) and 0.0 <= saving <= wait + 0.1
    valid = bad in (1e308, -0.0, 2**63)  # finite numbers at or above 0: a measurement, however odd
    if not valid:  # not a measurement: the unmeasured model, half the loading on 2 cores
        assert saving == pytest.approx(wait / 2, abs=0.1)
