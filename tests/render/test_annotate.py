"""annotate_trace: the original trace, byte-for-byte in its events, plus a findings track."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuprof.trace.chunks as C
from gpuprof.errors import InputError
from gpuprof.findings import EventRef, Evidence, Finding, Severity, SourceLocation
from gpuprof.render.annotate import FINDINGS_PID, FINDINGS_PROCESS_NAME, annotate_trace, annotation_events
from gpuprof.trace.load import load_trace

from .conftest import shared_trace

REAL = [
    "tbplugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",  # object, keys before events
    "tbplugin/historical_2020-12_list_format/resnet50_num_workers_0/worker0.pt.trace.json.gz",  # top-level list
    "hta/TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",  # keys (deviceProperties) after
    "hta/HolisticTraceAnalysis/tests/data/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",  # "]" in trailer strings
]


def _read_json(path: Path) -> Any:
    with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as fh:
        return json.load(fh)


@functools.lru_cache(maxsize=4)
def _original(path: Path) -> tuple[Any, int]:
    """The source trace parsed by json and the loader's event count (cached: the real traces are big)."""
    return _read_json(path), load_trace(path).num_events


def _events(doc: Any) -> list[dict[str, Any]]:
    return doc if isinstance(doc, list) else doc["traceEvents"]


@functools.lru_cache(maxsize=4)
def _findings_from(trace_path: Path) -> list[Finding]:
    """Findings pointing at real events of the trace: two overlapping ranges, a nested one, and one with no events."""
    tr = load_trace(trace_path)
    host = sorted(tr.ops or tr.annotations, key=lambda e: -e.dur)
    big, other = host[0], next(e for e in host[1:] if e.ts > host[0].ts)
    nested = next((e for e in tr.ops if big.ts < e.ts and e.end < big.end), None)
    refs = [EventRef(big.name, big.ts, big.dur, big.pid, big.tid), EventRef(other.name, other.ts, other.dur, other.pid, other.tid)]
    if nested is not None:
        refs.append(EventRef(nested.name, nested.ts, nested.dur, nested.pid, nested.tid))
    return [
        Finding(
            "GP203", "host-sync-item", Severity.WARNING, "aten::item blocks the host 3 times per step",
            "Keep the value on the GPU.", evidence=(Evidence("sync_us", 1234.0, 100.0, "us", tuple(refs)),),
            cost_us_per_step=1234.0, cost_share=0.1, location=SourceLocation("train.py", 12, "step"), source=str(trace_path),
        ),
        Finding("GP901", "few-steps", Severity.INFO, "Only 1 step was profiled", "Profile more steps.", evidence=(Evidence("num_steps", 1, 10, "steps"),)),
    ]


def _check_annotated(src: Path, out: Path, findings: list[Finding], added: int) -> list[dict[str, Any]]:
    (orig, orig_count), new = _original(src), _read_json(out)
    assert type(orig) is type(new)
    o_ev, n_ev = _events(orig), _events(new)
    assert n_ev[: len(o_ev)] == o_ev, "original events must be kept, in order, unchanged"
    assert len(n_ev) == len(o_ev) + added
    if isinstance(orig, dict):
        assert {k: v for k, v in new.items() if k != "traceEvents"} == {k: v for k, v in orig.items() if k != "traceEvents"}
        assert list(new) == list(orig)  # key order too (the splice must not move keys)
    extra = n_ev[len(o_ev):]
    assert all(e["pid"] == FINDINGS_PID for e in extra)
    # the loader sees every original event plus the new ones
    assert load_trace(out).num_events == orig_count + added
    return extra


# the big V100 traces only once (gzip output, the common case); the small ones both ways
@pytest.mark.slow
@pytest.mark.parametrize(
    "rel, suffix",
    [(REAL[0], ".json.gz"), (REAL[1], ".json.gz")] + [(r, s) for r in REAL[2:] for s in (".json.gz", ".json")],
)
def test_round_trip_on_real_traces(rel, suffix, tmp_path):
    src = shared_trace(rel)
    findings = list(_findings_from(src))
    out = tmp_path / f"annotated{suffix}"
    added = annotate_trace(src, findings, out)
    assert (out.read_bytes()[:2] == b"\x1f\x8b") == suffix.endswith(".gz")
    extra = _check_annotated(src, out, findings, added)

    meta = {(e["name"], e["tid"]): e["args"] for e in extra if e["ph"] == "M"}
    assert meta[("process_name", 0)] == {"name": FINDINGS_PROCESS_NAME}
    assert meta[("process_sort_index", 0)]["sort_index"] < 0
    thread_names = {tid: a["name"] for (n, tid), a in meta.items() if n == "thread_name"}
    assert "GP203 host-sync-item" in thread_names.values() and "GP901 few-steps" in thread_names.values()

    refs = findings[0].evidence[0].events
    slices = [e for e in extra if e["ph"] == "X"]
    assert sorted((s["ts"], s["dur"]) for s in slices) == sorted((r.ts, r.dur) for r in refs)
    for s in slices:
        assert s["name"].startswith("GP203 ")
        assert s["args"]["severity"] == "warning" and s["args"]["location"] == "train.py:12 (step)"
        assert s["args"]["cost_us_per_step"] == 1234.0 and s["args"]["advice"] == "Keep the value on the GPU."
        assert thread_names[s["tid"]].startswith("GP203 host-sync-item")
    # overlapping (not nested) ranges go to different lanes; a nested range may share its parent's
    by_tid: dict[int, list[tuple[float, float]]] = {}
    for s in slices:
        by_tid.setdefault(s["tid"], []).append((s["ts"], s["ts"] + s["dur"]))
    for ranges in by_tid.values():
        ranges.sort()
        for (_a0, a1), (b0, b1) in zip(ranges, ranges[1:]):
            assert b0 >= a1 or b1 <= a1, "partial overlap on one thread"

    (marker,) = [e for e in extra if e["ph"] == "i"]
    assert marker["s"] == "g" and marker["name"].startswith("GP901 ")
    first_x = min(e["ts"] for e in _events(_original(src)[0]) if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)))
    assert marker["ts"] == first_x


@pytest.mark.slow  # annotates two real traces in small blocks (seconds each)
@pytest.mark.parametrize("rel", REAL[1:3])
def test_small_blocks_cut_at_event_boundaries(rel, tmp_path, monkeypatch):
    # many blocks per file: exercises the validated cuts and the tail search across block ends
    monkeypatch.setattr(C, "BLOCK", 256 * 1024)
    src = shared_trace(rel)
    findings = _findings_from(src)
    out = tmp_path / "a.json.gz"
    _check_annotated(src, out, findings, annotate_trace(src, findings, out))


def _write(path: Path, doc: Any, indent: int | None = None) -> Path:
    path.write_text(json.dumps(doc, indent=indent))
    return path


EV = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0 + i, "dur": 0.5, "args": {"Input dims": [[2, 3]]}} for i in range(5)]
ONE = [Finding("GP101", "low-gpu-utilization", Severity.ERROR, "GPU busy 10% [bad]", "do x", evidence=(Evidence("u", 0.1, 0.8, "fraction", (EventRef("aten::mm", 11.0, 0.5),)),), cost_us_per_step=5.0)]


@pytest.mark.parametrize(
    "doc",
    [
        {"traceEvents": EV},
        {"schemaVersion": 1, "traceEvents": EV, "deviceProperties": [{"id": 0, "name": "x]"}, {"id": 1}], "note": "a]b", "z": [[1], [2]]},
        {"traceEvents": []},
        {"a": {"b": [1, 2]}, "traceEvents": [], "c": []},
        EV,
        [],
    ],
    ids=["plain", "trailer-arrays", "empty", "empty-with-keys", "list", "empty-list"],
)
@pytest.mark.parametrize("indent", [None, 2])
def test_synthetic_layouts(doc, indent, tmp_path):
    src = _write(tmp_path / "in.json", doc, indent)
    out = tmp_path / "out.json"
    added = annotate_trace(src, ONE, out)
    new = json.loads(out.read_text())
    assert type(new) is type(doc)
    events = _events(new)
    assert events[: len(_events(doc))] == _events(doc)
    assert len(events) == len(_events(doc)) + added
    if isinstance(doc, dict):
        assert {k: v for k, v in new.items() if k != "traceEvents"} == {k: v for k, v in doc.items() if k != "traceEvents"}
    (x,) = [e for e in events[len(_events(doc)):] if e["ph"] == "X"]
    assert (x["ts"], x["dur"]) == (11.0, 0.5) and x["name"] == "GP101 GPU busy 10% [bad]"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text("]}[{,\"\\ a", max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ab]", max_size=3), inner, max_size=3),
    max_leaves=8,
)
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "M"]), "name": st.text("ab}{,]", max_size=5), "ts": st.floats(0, 1e6), "dur": st.floats(0, 10)},
    optional={"args": st.dictionaries(st.text("xy", min_size=1, max_size=2), json_values, max_size=3)},
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(event, max_size=12),
    before=st.dictionaries(st.sampled_from(["schemaVersion", "deviceProperties", "meta"]), json_values, max_size=2),
    after=st.dictionaries(st.sampled_from(["deviceProperties", "traceName", "x"]), json_values, max_size=3),
    list_format=st.booleans(),
    indent=st.sampled_from([None, 0, 1]),
    block=st.sampled_from([7, 64, 1 << 20]),
)
def test_any_layout_round_trips(events, before, after, list_format, indent, block, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "BLOCK", block)
    doc: Any = events if list_format else {**before, "traceEvents": events, **after}
    src = _write(tmp_path / "h.json", doc, indent)
    out = tmp_path / "h.out.json"
    added = annotate_trace(src, ONE, out)
    new = json.loads(out.read_text())
    assert _events(new)[: len(events)] == events and len(_events(new)) == len(events) + added
    if not list_format:
        assert {k: v for k, v in new.items() if k != "traceEvents"} == {k: v for k, v in doc.items() if k != "traceEvents"}


def test_no_findings_still_marks_the_trace(tmp_path):
    src = _write(tmp_path / "in.json", {"traceEvents": EV})
    out = tmp_path / "out.json.gz"
    added = annotate_trace(src, [], out)
    extra = _events(_read_json(out))[len(EV):]
    assert len(extra) == added
    assert [e["name"] for e in extra if e["ph"] == "i"] == ["gpuprof: no findings"]


def test_threads_follow_cost_order_and_codes_share_a_thread():
    cheap = Finding("GP301", "small-kernels", Severity.WARNING, "m", "a", cost_us_per_step=1.0, evidence=(Evidence("x", 1, None, "", (EventRef("k", 5.0, 1.0),)),))
    dear = Finding("GP101", "low-util", Severity.WARNING, "m", "a", cost_us_per_step=9.0)
    again = Finding("GP301", "small-kernels", Severity.WARNING, "m2", "a", cost_us_per_step=0.5, evidence=(Evidence("x", 1, None, "", (EventRef("k", 50.0, 1.0),)),))
    evs = annotation_events([cheap, dear, again], start_ts=3.0)
    names = {e["tid"]: e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    assert names == {1: "GP101 low-util", 2: "GP301 small-kernels"}
    assert sorted(e["ts"] for e in evs if e["ph"] == "X" and e["tid"] == 2) == [5.0, 50.0]
    assert [(e["ts"], e["tid"]) for e in evs if e["ph"] == "i"] == [(3.0, 1)]


def test_out_may_be_the_source(tmp_path):
    src = _write(tmp_path / "same.json", {"traceEvents": EV})
    added = annotate_trace(src, ONE, src)
    assert len(_events(json.loads(src.read_text()))) == len(EV) + added
    assert [p.name for p in tmp_path.iterdir()] == ["same.json"]  # no temporary file left behind


def test_unwritable_output_names_the_output(tmp_path):
    src = _write(tmp_path / "in.json", {"traceEvents": EV})
    out = tmp_path / "missing-dir" / "out.json"
    with pytest.raises(InputError) as err:
        annotate_trace(src, ONE, out)
    assert err.value.path == str(out)


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"traceEvents": [{"ph": "X", "ts": 1}', "truncated"),
        ('{"other": 1}', "traceEvents"),
        ("hello", "not a PyTorch profiler trace"),
        ("", "empty"),
    ],
)
def test_bad_input_names_the_input(text, problem, tmp_path):
    src = tmp_path / "bad.json"
    src.write_text(text)
    out = tmp_path / "out.json"
    with pytest.raises(InputError) as err:
        annotate_trace(src, ONE, out)
    assert err.value.path == str(src) and problem in err.value.problem
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_truncated_gzip_names_the_input(tmp_path):
    data = gzip.compress(json.dumps({"traceEvents": EV * 50}).encode())
    src = tmp_path / "cut.json.gz"
    src.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as err:
        annotate_trace(src, ONE, tmp_path / "o.json.gz")
    assert err.value.path == str(src)


def test_cli_annotates_each_of_several_paths_into_a_directory(tmp_path):
    """Several paths (the ranks of a job): one annotated file per trace, same-named traces kept apart."""
    from click.testing import CliRunner

    from gpuprof.cli import cli
    from gpuprof_testing.tracegen import TraceBuilder, simple_training

    a = simple_training(TraceBuilder(), steps=3).write(tmp_path / "rank0" / "t.pt.trace.json")
    b = simple_training(TraceBuilder(), steps=4).write(tmp_path / "rank1" / "t.pt.trace.json")
    out = tmp_path / "annotated"
    res = CliRunner().invoke(cli, ["analyze", str(a), str(b), "--format", "json", "-o", str(tmp_path / "r.json"),
                                   "--annotate", str(out)])
    assert res.exit_code in (0, 1), res.output
    assert sorted(p.name for p in out.iterdir()) == ["t.pt.trace-2.gpuprof.json.gz", "t.pt.trace.gpuprof.json.gz"]
    report = json.loads((tmp_path / "r.json").read_text())
    for src, name in ((a, "t.pt.trace.gpuprof.json.gz"), (b, "t.pt.trace-2.gpuprof.json.gz")):
        mine = [f for f in report["findings"] if f["source"] == str(src)]
        new = _read_json(out / name)
        assert _events(new)[: len(_events(_read_json(src)))] == _events(_read_json(src))  # its own trace, kept
        track = [e for e in _events(new) if e.get("pid") == FINDINGS_PID and e.get("ph") == "X"]
        assert mine and {f["code"] for f in mine} <= {e["name"].split(" ")[0] for e in track}
    # a pipe among the paths: the one-line refusal, nothing written
    res = CliRunner().invoke(cli, ["analyze", str(a), "-", "--annotate", str(tmp_path / "x")])
    assert res.exit_code == 2 and "not a pipe" in res.output and not (tmp_path / "x").exists()


def test_cli_annotate_to_a_name_ending_in_a_slash_writes_into_that_directory(tmp_path):
    """`--annotate annotated/` with one trace: the directory is made and the trace written into it (it once
    wrote a file named `annotated`); `-o out/` and `--html page/` name no file: one line, exit 2, nothing written."""
    from click.testing import CliRunner

    from gpuprof.cli import cli
    from gpuprof_testing.tracegen import TraceBuilder, simple_training

    src = simple_training(TraceBuilder(), steps=3).write(tmp_path / "in" / "t.pt.trace.json")
    res = CliRunner().invoke(cli, ["analyze", str(src), "--annotate", f"{tmp_path / 'annotated'}/"])
    assert res.exit_code in (0, 1), res.output
    assert (tmp_path / "annotated").is_dir()
    assert [p.name for p in (tmp_path / "annotated").iterdir()] == ["t.pt.trace.gpuprof.json.gz"]
    assert _events(_read_json(tmp_path / "annotated" / "t.pt.trace.gpuprof.json.gz"))[:3] == _events(_read_json(src))[:3]
    assert "1 annotated trace written to" in res.output
    for option in ("-o", "--html"):
        res = CliRunner().invoke(cli, ["analyze", str(src), option, f"{tmp_path / 'out'}/"])
        assert res.exit_code == 2 and "the name ends in /" in res.output, res.output
        assert not (tmp_path / "out").exists()
