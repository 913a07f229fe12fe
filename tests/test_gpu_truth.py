"""The GPU-truth recorder (examples/record_gpu_truth.py) and the checks over tests/data/gpu (issue 14).

Two halves:

* the recorder and its checker, tested on CPU now: the one-line exit without
  CUDA, the refusal to put a CPU recording in tests/data/gpu, the size caps
  (traces cut to their first steps, snapshots to their newest history), and
  the whole pipeline through ``--allow-cpu`` (examples run, expectations
  judged, files kept, manifest and README written, every check re-run),
  including checks that must fail on a tampered manifest;
* the recordings in tests/data/gpu, checked against their manifest: skipped
  while the folder holds none (no GPU has been lent yet; see its README).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
DATA = REPO / "tests" / "data" / "gpu"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


check = _load("gpu_truth_check")


def _recorder() -> ModuleType:
    pytest.importorskip("torch")
    return _load("record_gpu_truth")


def _cuda() -> bool:
    torch = pytest.importorskip("torch")
    return bool(torch.cuda.is_available())


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                OMP_NUM_THREADS="1")


# --------------------------------------------------------------------------- recorder, no GPU
@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_without_cuda_says_so_in_one_line_and_exits_0(tmp_path: Path) -> None:
    if _cuda():
        pytest.skip("CUDA is available: the recorder would record")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(EXAMPLES / "record_gpu_truth.py"), str(out)],
                          capture_output=True, text=True, timeout=120, env=_env(), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0] and "nothing recorded" in lines[0], lines
    assert not out.exists()


def test_missing_dependency_is_named_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _recorder()
    monkeypatch.setattr(rec, "REQUIRED", (*rec.REQUIRED, "gpuprof_no_such_wheel"))
    assert rec.main([str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gpuprof_no_such_wheel" in err[0] and "wheels" in err[0]
    assert not (tmp_path / "out").exists()


def test_cpu_recording_refused_in_tests_data_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if _cuda():
        pytest.skip("CUDA is available")
    rec = _recorder()
    target = tmp_path / "tests" / "data" / "gpu"
    assert rec.main([str(target), "--allow-cpu"]) == 2
    assert "refusing" in capsys.readouterr().err
    assert not target.exists()


def test_source_line_finds_exactly_one_line() -> None:
    rec = _recorder()
    line = rec.source_line(*rec.LEAK_LINE)
    text = (EXAMPLES / "memory_leak.py").read_text().splitlines()[line - 1]
    assert "loss_fn(model(x), y)" in text
    with pytest.raises(ValueError, match="2 lines"):
        rec.source_line("memory_leak.py", "args.baseline")


# --------------------------------------------------------------------------- size caps
def test_trace_over_the_cap_is_cut_to_its_first_steps(tmp_path: Path) -> None:
    rec = _recorder()
    src = next((EXAMPLES / "sample_trace").glob("*.pt.trace.json.gz"))  # real: torch 2.13 CPU, 5 steps
    assert rec.keep_trace(src, tmp_path / "same.gz", src.stat().st_size) is None  # fits: a plain copy
    assert (tmp_path / "same.gz").read_bytes() == src.read_bytes()
    cap = int(src.stat().st_size * 0.6)
    dst = tmp_path / "cut.pt.trace.json.gz"
    cut = rec.keep_trace(src, dst, cap)
    assert cut is not None and cut["steps_recorded"] == 5 and 1 <= cut["steps_kept"] < 5
    assert dst.stat().st_size <= cap
    assert check.raw_step_count(dst) == cut["steps_kept"]
    from gpuprof.analysis import analyze

    assert analyze(dst).traces[0].num_steps == cut["steps_kept"]  # still a trace gpuprof reads
    with pytest.raises(ValueError, match="even cut to its first step"):
        rec.keep_trace(src, tmp_path / "tiny.gz", 1000)


def test_snapshot_over_the_cap_keeps_its_newest_history(tmp_path: Path) -> None:
    rec = _recorder()
    from gpuprof.memory.snapshot.safeload import load_pickle_file
    from gpuprof_testing.snapshots import MiB, SnapshotBuilder

    b = SnapshotBuilder()
    keep = [b.alloc(1 * MiB, b.stack(("train.py", 10, "step")))]
    for i in range(400):
        keep.append(b.alloc(4096, b.stack(("train.py", 20 + i % 7, "step"))))
        b.free(keep.pop(0))
    src = Path(b.dump(tmp_path / "big.pickle"))
    full = len(load_pickle_file(src)["device_traces"][0])
    cap = src.stat().st_size // 3
    cut = rec.keep_snapshot(src, tmp_path / "small.pickle", cap)
    small = load_pickle_file(tmp_path / "small.pickle")
    assert cut is not None and cut["history_entries_recorded"] == [full]
    assert (tmp_path / "small.pickle").stat().st_size <= cap
    kept = small["device_traces"][0]
    assert len(kept) == cut["history_entries_kept"] < full
    assert kept == load_pickle_file(src)["device_traces"][0][-len(kept):]  # the newest, as the ring buffer
    assert small["segments"] == load_pickle_file(src)["segments"]  # the state is untouched


# --------------------------------------------------------------------------- checks on snapshots, without a GPU
def _manifest(folder: Path, entries: list[dict[str, Any]]) -> None:
    (folder / check.MANIFEST).write_text(json.dumps({"version": check.MANIFEST_VERSION, "files": entries}))


def test_oom_and_leak_snapshot_checks_pass_and_fail(tmp_path: Path) -> None:
    # Snapshots from gpuprof's allocator model in a temp folder (nothing is committed): the two
    # snapshot checks the GPU recordings will get, passing on the right numbers and failing on wrong ones.
    from gpuprof_testing.snapshots import MiB, SnapshotBuilder

    b = SnapshotBuilder(device_memory=1024 * MiB)
    held = 0
    with pytest.raises(MemoryError):
        while True:
            b.alloc(96 * MiB, b.stack(("record_gpu_truth.py", 321, "oom_child")))
            held += 1
    b.dump(tmp_path / "oom.pickle")
    leak = SnapshotBuilder()
    for _ in range(6):
        leak.alloc(2 * MiB, leak.stack(("memory_leak.py", 34, "main")))
        leak.free(leak.alloc(1 * MiB, leak.stack(("memory_leak.py", 36, "main"))))
    leak.dump(tmp_path / "leak.pickle")
    oom = {"kind": "oom", "requested": 96 * MiB, "allocated": held * 96 * MiB, "slack": 2 * MiB,
           "file": "record_gpu_truth.py", "line": 321}
    site = {"kind": "leak_site_snapshot", "file": "memory_leak.py", "line": 34}
    _manifest(tmp_path, [{"file": "oom.pickle", "checks": [oom]}, {"file": "leak.pickle", "checks": [site]}])
    results = check.check_folder(tmp_path)
    assert [r.ok for r in results] == [True, True], [r.line() for r in results]
    wrong = [{**oom, "requested": 64 * MiB}, {**oom, "allocated": (held + 1) * 96 * MiB}, {**oom, "line": 322}]
    _manifest(tmp_path, [{"file": "oom.pickle", "checks": wrong},
                         {"file": "leak.pickle", "checks": [{**site, "line": 36}]},
                         {"file": "absent.pickle", "checks": [site]}])
    results = check.check_folder(tmp_path)
    assert [r.ok for r in results] == [False] * 5, [r.line() for r in results]


# --------------------------------------------------------------------------- the whole pipeline on CPU
@pytest.fixture(scope="module")
def cpu_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    if _cuda():
        pytest.skip("CUDA is available: --allow-cpu is the CPU fallback")
    out = tmp_path_factory.mktemp("gpu_truth") / "out"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "record_gpu_truth.py"), str(out), "--allow-cpu",
         "--only", "memory_leak", "device_mismatch", "--max-bytes", "500000"],
        capture_output=True, text=True, timeout=400, env=_env(), cwd=str(out.parent),
    )
    return out, proc


@pytest.mark.slow
def test_cpu_pipeline_records_judges_and_checks(cpu_recording: tuple[Path, subprocess.CompletedProcess[str]]
                                                ) -> None:
    out, proc = cpu_recording
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["device"] == "cpu" and manifest["environment"]["torch"]
    runs = {r["name"]: r for r in manifest["runs"]}
    assert set(runs) == {"memory_leak", "memory_leak_baseline", "device_mismatch", "device_mismatch_baseline"}
    assert all(r["ok"] for r in runs.values())
    assert "GP640" in runs["memory_leak"]["codes"] and "GP640" not in runs["memory_leak_baseline"]["codes"]
    assert runs["device_mismatch"]["rc"] == 1 and {"GP612", "GP613"} <= set(runs["device_mismatch"]["codes"])
    names = {f["file"] for f in manifest["files"]}
    assert names == {"memory_leak.pt.trace.json.gz", "memory_leak.report.json",
                     "memory_leak_baseline.pt.trace.json.gz", "memory_leak_baseline.report.json",
                     "device_mismatch.report.json",  # it fails in step 0: a report, no trace
                     "device_mismatch_baseline.pt.trace.json.gz", "device_mismatch_baseline.report.json"}
    assert not list(out.glob("*.pickle"))  # the leak and OOM snapshots are CUDA-only
    for f in manifest["files"]:
        assert (out / f["file"]).stat().st_size == f["bytes"] <= 500_000
    by_file = {f["file"]: {c["kind"]: c for c in f["checks"]} for f in manifest["files"]}
    leak = by_file["memory_leak.pt.trace.json.gz"]
    assert leak["leak_site_trace"]["source_line"] == _recorder().source_line(*_recorder().LEAK_LINE)
    assert leak["steps"]["count"] == 5 and leak["gpu_utilization"]["value"] is None
    assert by_file["device_mismatch.report.json"]["report_codes"]["locations"][0]["code"] == "GP612"
    readme = (out / "README.md").read_text()
    assert "CPU run" in readme and all(f"`{n}`" in readme for n in names)
    table = proc.stdout.splitlines()
    assert any(line.startswith("memory_leak ") and line.endswith("ok") for line in table)
    assert any(line.startswith("file checks:") for line in table)


@pytest.mark.slow
def test_cpu_recording_passes_its_checks_and_tampering_fails_them(
        cpu_recording: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path) -> None:
    src, _ = cpu_recording
    results = check.check_folder(src)
    assert results and all(r.ok for r in results), [r.line() for r in results if not r.ok]
    kinds = {r.check for r in results}
    assert {"size", "analyze_codes", "report_codes", "steps", "gpu_utilization", "leak_site_trace"} <= kinds

    folder = tmp_path / "copy"
    shutil.copytree(src, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    for f in manifest["files"]:
        for c in f["checks"]:
            if c["kind"] == "steps":
                c["count"] += 1
            elif c["kind"] == "leak_site_trace":
                c["function"] = "not_main"
            elif c["kind"] == "report_codes" and c["must"]:
                c["must"] = [*c["must"], "GP999"]
            elif c["kind"] == "report_codes" and c["must_not"]:
                c["must_not"] = []  # left alone: these must still pass
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "memory_leak_baseline.report.json").write_text("{}")  # changed bytes: the sha256 differs
    results = check.check_folder(folder)
    failed = {(r.file, r.check) for r in results if not r.ok}
    assert ("memory_leak.pt.trace.json.gz", "steps") in failed
    assert ("memory_leak.pt.trace.json.gz", "leak_site_trace") in failed
    assert ("device_mismatch.report.json", "report_codes") in failed
    assert ("memory_leak_baseline.report.json", "size") in failed
    assert ("memory_leak_baseline.pt.trace.json.gz", "analyze_codes") not in failed
    assert check.main([str(folder)]) == 1


# --------------------------------------------------------------------------- the real recordings
def _recorded() -> dict[str, Any] | None:
    path = DATA / check.MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


RECORDED = _recorded()
needs_recording = pytest.mark.skipif(
    RECORDED is None,
    reason="tests/data/gpu holds no recordings yet (no CUDA GPU has been lent; see tests/data/gpu/README.md)",
)


@needs_recording
def test_recordings_come_from_a_cuda_gpu() -> None:
    assert RECORDED is not None
    assert RECORDED["device"] == "cuda", "tests/data/gpu must hold CUDA recordings only"
    env = RECORDED["environment"]
    assert env["gpu"] and env["driver"] and env["torch_cuda"] and env["torch"]
    assert all(r["ok"] for r in RECORDED["runs"]), [(r["name"], r["problems"]) for r in RECORDED["runs"]]
    kinds = {f["file"] for f in RECORDED["files"]}
    assert {"memory_leak.memory_snapshot.pickle", "oom.memory_snapshot.pickle"} <= kinds


@needs_recording
@pytest.mark.parametrize("entry", RECORDED["files"] if RECORDED else [], ids=lambda e: e["file"])
def test_recorded_file_matches_its_manifest(entry: dict[str, Any]) -> None:
    results = check.check_entry(DATA, entry)
    assert results and all(r.ok for r in results), "\n".join(r.line() for r in results)


@pytest.mark.slow
def test_a_failing_run_is_reported_and_the_others_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    if _cuda():
        pytest.skip("CUDA is available")
    rec = _recorder()
    broken = rec.Case("no_such_example.py", False, 5, frozenset({"GP601"}), frozenset())
    real = next(c for c in rec.CPU_CASES if c.name == "device_mismatch")  # fails in step 0: quick
    monkeypatch.setattr(rec, "CPU_CASES", [broken, real])
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert rec.main([str(tmp_path / "out"), "--allow-cpu"]) == 1
    stdout = capsys.readouterr().out
    assert any(line.startswith("no_such_example ") and "FAIL" in line and "no report.json" in line
               for line in stdout.splitlines()), stdout
    assert any(line.startswith("device_mismatch ") and line.endswith("ok") for line in stdout.splitlines()), stdout
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [(r["name"], r["ok"]) for r in manifest["runs"]] == [("no_such_example", False), ("device_mismatch", True)]
    assert [f["file"] for f in manifest["files"]] == ["device_mismatch.report.json"]
