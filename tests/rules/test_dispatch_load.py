"""GP308's decision does not move with the host's load (issue 41.5). A CPU hog (4 busy processes on 2 cores)
does two things to a recorded step: it slows every call about alike (shared caches and cores), and it preempts the
trainer now and then for milliseconds, inside an operator or between operators. Counts of operator calls do not
move; durations do. The tiny threshold is counted in dispatch units (the median self time of a view operator's
call in the same steps), so an operator that was small on a quiet host stays small on the loaded one; medians per
operator ignore the preemptions. Tested on the same operators with their wall times stretched and preempted."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from gpuprof.analysis import analyze
from gpuprof.rules.dispatch import dispatch_stats
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import compute_metrics
from gpuprof_testing.tracegen import TraceBuilder


def _events(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    doc: dict[str, Any] = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc


def loaded(src: Path, dst: Path, stretch: float, pauses: tuple[tuple[float, float], ...] = ()) -> Path:
    """``src`` as a loaded host records it: every host event's time stretched by ``stretch`` from the first one,
    then for each (fraction of the span, µs) a preemption: the clock stops there, what spans the instant grows
    by the pause and what comes after it moves."""
    doc = _events(src)
    evs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in evs)
    for e in evs:
        e["ts"], e["dur"] = t0 + (e["ts"] - t0) * stretch, e["dur"] * stretch
    span = max(e["ts"] + e["dur"] for e in evs) - t0
    for frac, us in pauses:
        at = t0 + frac * span
        for e in evs:
            if e["ts"] >= at:
                e["ts"] += us
            elif e["ts"] + e["dur"] > at:
                e["dur"] += us
    dst.write_text(json.dumps(doc))
    return dst


def _loop(path: Path, samples: int = 10) -> Path:
    """A small model one sample at a time, ~120 operator calls a step, its matmul (aten::addmm) at 7 µs of
    self time: small on this host, but near the 10 µs that a fixed threshold would use."""
    tb = TraceBuilder(device=None, gap_us=0.0)
    for _ in range(4):
        with tb.step():
            for _ in range(samples):
                with tb.op("aten::select", us=2):
                    with tb.op("aten::as_strided", us=1):
                        pass
                with tb.op("aten::linear", us=12):
                    with tb.op("aten::t", us=2.5):
                        with tb.op("aten::transpose", us=1.5):
                            with tb.op("aten::as_strided", us=0.5):
                                pass
                    with tb.op("aten::addmm", us=7):
                        pass
                for name, us in (("aten::tanh", 6), ("aten::sub", 4), ("aten::pow", 5), ("aten::mean", 6),
                                 ("aten::add", 4), ("aten::view", 1), ("aten::expand", 1)):
                    with tb.op(name, us=us):
                        pass
                    tb.idle(us=1)
            with tb.op("aten::item", us=3):
                pass
    return tb.write(path)


def _gp308(path: Path) -> list[Any]:
    return [f for f in analyze(str(path)).findings if f.code == "GP308"]


HOG = ((0.13, 1500.0), (0.41, 2500.0), (0.77, 2000.0))  # three preemptions of a few ms in four steps


@pytest.mark.parametrize("stretch", [1.5, 2.0, 3.0])
def test_the_same_verdict_quiet_and_beside_a_cpu_hog(tmp_path: Path, stretch: float) -> None:
    quiet = _loop(tmp_path / "quiet.json")
    hog = loaded(quiet, tmp_path / "hog.json", stretch, HOG)
    (q,) = _gp308(quiet)
    (h,) = _gp308(hog)  # a fixed 10 µs threshold made aten::addmm compute here: no verdict
    qe, he = q.evidence[0], h.evidence[0]
    assert qe.extra["ops_per_step"] == he.extra["ops_per_step"]  # a count: the load cannot move it
    assert qe.extra["small_ops_per_step"] == he.extra["small_ops_per_step"] >= 100
    assert qe.extra["compute_share"] == he.extra["compute_share"] == 0
    assert he.extra["dispatch_unit_us"] == pytest.approx(qe.extra["dispatch_unit_us"] * stretch)
    assert he.extra["tiny_us"] == pytest.approx(qe.extra["tiny_us"] * stretch)
    # the framework's share: the preemptions split between operators and Python, as the time does
    assert abs(qe.value - he.value) < 0.1 and he.value >= 0.3


def test_a_compute_step_stays_compute_beside_a_cpu_hog(tmp_path: Path) -> None:
    tb = TraceBuilder(device=None, gap_us=0.0)
    for _ in range(4):
        with tb.step():
            for _ in range(150):  # as many view and small calls as above, and a 20 ms GEMM: compute
                with tb.op("aten::view", us=1):
                    pass
            with tb.op("aten::addmm", us=20_000):
                pass
    quiet = tb.write(tmp_path / "quiet.json")
    assert _gp308(quiet) == []
    assert _gp308(loaded(quiet, tmp_path / "hog.json", 2.0, HOG)) == []


def test_without_view_operators_the_threshold_is_tiny_us(tmp_path: Path) -> None:
    tb = TraceBuilder(device=None, gap_us=0.0)
    for _ in range(3):
        with tb.step():
            for _ in range(120):
                with tb.op("aten::add", us=4):
                    pass
    st = dispatch_stats(compute_metrics(load_trace(tb.write(tmp_path / "t.json"))), 10.0, 20.0)
    assert st is not None and st.unit_us is None and st.tiny_us == 10.0 and st.small == 120


@pytest.mark.slow
def test_a_real_cpu_trace_splits_the_same_when_stretched(tmp_path: Path) -> None:
    from gpuprof_testing.realtraces import shared_path

    src = next(shared_path("tbplugin", "generated_cpu_torch2.13", "tiny_cpu_nw0").glob("*.pt.trace.json.gz"))
    a = dispatch_stats(compute_metrics(load_trace(src)), 10.0, 20.0)
    b = dispatch_stats(compute_metrics(load_trace(loaded(src, tmp_path / "slow.json", 2.0))), 10.0, 20.0)
    c = dispatch_stats(compute_metrics(load_trace(loaded(src, tmp_path / "hog.json", 2.0, HOG))), 10.0, 20.0)
    assert a is not None and b is not None and c is not None and a.unit_us is not None
    # a fixed 10 µs threshold made 12 operator calls a step compute when slowed 2x (0.10 -> 0.16 compute)
    assert a.leaves == b.leaves == c.leaves and a.small == b.small == c.small
    assert b.tiny_us == c.tiny_us == pytest.approx(2 * a.tiny_us)
    for share in ("compute_us", "framework_us"):
        assert b.share(getattr(b, share)) == pytest.approx(a.share(getattr(a, share)), abs=0.01)
    # 3 preemptions of 1.5-2.5 ms in 3 steps of 2.4 ms: inside a computing operator they count as compute, between
    # operators as the rest; both move the verdict toward silence, and the verdict is the same: none
    assert c.share(c.compute_us) >= a.share(a.compute_us) - 0.01
    assert c.share(c.framework_us) <= a.share(a.framework_us) + 0.01
    assert not _gp308(src) and not _gp308(tmp_path / "hog.json")
