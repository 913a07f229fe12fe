"""``gpuprof analyze`` imports what it uses, not what it might: checked on ``sys.modules``, not on a clock.

Each case runs the command line in a fresh interpreter (the installed entry
point's code, ``gpuprof.cli.main``), then writes the names in ``sys.modules``
at exit. Start-up time is measured in bench/ (``bench/bench_imports.py``); this
test keeps the structure that makes it short: no torch ever, no
fsspec/dask/TensorBoard without a URL or ``--dask``, no renderer that was not
asked for, no other command's code (docs/performance.md, "Start-up").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample_trace"

RUN = r'''
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from gpuprof.cli import main
main(sys.argv[2:])
'''

# never on the analyze path, whatever the options (third-party packages, top-level names)
NEVER = ["torch", "fsspec", "dask", "distributed", "tensorboard", "torch_tb_profiler", "lightning",
         "pytorch_lightning", "transformers", "accelerate", "pandas", "pyarrow", "matplotlib", "IPython"]
# gpuprof's own code of other commands and of capture (its code registry modules excepted)
OTHER_COMMANDS = ["gpuprof.cli.diff", "gpuprof.cli.memory", "gpuprof.cli.rules", "gpuprof.diff", "gpuprof.commands.diff",
                  "gpuprof.commands.memory", "gpuprof.commands.export", "gpuprof.commands.explain", "gpuprof.mcp",
                  "gpuprof.cli.export", "gpuprof.cli.history", "gpuprof.export", "gpuprof.history",
                  "gpuprof.capture.api", "gpuprof.capture.session", "gpuprof.capture.checks",
                  "gpuprof.memory.analysis", "gpuprof.memory.replay", "gpuprof.memory.load",
                  "gpuprof.tbplugin", "gpuprof.integrations", "gpuprof.cli.run", "gpuprof.run"]
RENDERERS = {"terminal": ["gpuprof.render.terminal", "rich"], "markdown": ["gpuprof.render.markdown"],
             "json": ["gpuprof.render.jsonout"], "html": ["gpuprof.htmlpage", "gpuprof.render.notebook", "html"],
             "tensorboard": ["gpuprof.render.tensorboard", "gpuprof.render.tbtext"]}


def _modules_after(tmp_path: Path, *args: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", RUN, str(out), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr  # 1: findings at or above the bar, not an error
    return set(json.loads(out.read_text()))


def _loaded(mods: set[str], name: str) -> bool:
    return name in mods or any(m.startswith(name + ".") for m in mods)


@pytest.mark.parametrize("fmt", ["json", "terminal", "markdown"])
def test_analyze_imports_only_what_it_uses(tmp_path: Path, fmt: str) -> None:
    report = tmp_path / "report.out"
    mods = _modules_after(tmp_path, "analyze", str(SAMPLE), "--format", fmt, "-o", str(report))
    assert report.stat().st_size > 0 and "gpuprof.analysis" in mods  # it ran: the lists below mean something
    assert all(_loaded(mods, m) for m in RENDERERS[fmt]), f"the {fmt} renderer did not run"
    unwanted = [m for m in NEVER + OTHER_COMMANDS if _loaded(mods, m)]
    unwanted += [m for other, names in RENDERERS.items() if other != fmt for m in names
                 if _loaded(mods, m) and m not in RENDERERS[fmt]]
    assert unwanted == [], f"gpuprof analyze --format {fmt} imported {unwanted}"


def test_one_trace_needs_no_cross_rank_merge(tmp_path: Path) -> None:
    mods = _modules_after(tmp_path, "analyze", str(SAMPLE), "--format", "json", "-o", str(tmp_path / "r.json"))
    assert "gpuprof.distributed.merge" not in mods and "gpuprof.distributed.arrivals" not in mods


# what one trace does not use (bench/README.md, "Start-up imports", 2026-11-26): the pool and the Dask
# scheduler (one file, no --dask), the saved-report reader and the node reports (asked only whether the
# input is a report: gpuprof.inputs.is_report_file), numpy.ma (numpy 2's plain np.unique imports it:
# gpuprof.trace.intervals.sorted_unique), traceback (the CLI's error path)
ONE_TRACE_SKIPS = ["gpuprof.pool", "gpuprof.cluster", "gpuprof.saved.read", "gpuprof.distributed.reports",
                   "numpy.ma", "traceback"]


@pytest.mark.parametrize("fmt", ["json", "terminal"])
def test_one_trace_imports_no_pool_no_report_reader_no_masked_arrays(tmp_path: Path, fmt: str) -> None:
    mods = _modules_after(tmp_path, "analyze", str(SAMPLE), "--format", fmt, "-o", str(tmp_path / "r.out"))
    assert "gpuprof.analysis" in mods and "gpuprof.inputs" in mods and "numpy" in mods  # it ran
    assert [m for m in ONE_TRACE_SKIPS if _loaded(mods, m)] == []


def test_saved_report_and_two_traces_still_load_what_they_need(tmp_path: Path) -> None:
    """The modules left out above are still imported where they are used (the test above means something)."""
    saved = tmp_path / "saved.json"
    _modules_after(tmp_path, "analyze", str(SAMPLE), "--format", "json", "-o", str(saved))
    mods = _modules_after(tmp_path, "analyze", str(saved), "--format", "json", "-o", str(tmp_path / "again.json"))
    assert "gpuprof.saved.read" in mods
    trace = next(SAMPLE.glob("*.pt.trace.json.gz"))
    mods = _modules_after(tmp_path, "analyze", str(trace), str(trace), "--jobs", "1", "--format", "json",
                          "-o", str(tmp_path / "two.json"))
    assert "gpuprof.pool" in mods


def test_help_lists_every_command_and_imports_none_it_does_not_run(tmp_path: Path) -> None:
    """The commands are imported when run (or for their own help), so `--help` must still list them all."""
    proc = subprocess.run([sys.executable, "-m", "gpuprof", "--help"], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split("Commands:")[1]
    for cmd in ("analyze", "diff", "explain", "memory", "rules", "run"):
        assert f"  {cmd} " in listed, cmd
    mods = _modules_after(tmp_path, "rules")
    assert "gpuprof.cli.rules" in mods and not _loaded(mods, "gpuprof.cli.diff") and not _loaded(mods, "torch")


# the timeline's code (issue 44): built only for a view that draws it (--html, --to, --timeline, the tab)
TIMELINE_CODE = ["gpuprof.views.timeline", "gpuprof.views.timelinelanes", "gpuprof.views.timelinepath",
                 "gpuprof.views.decimate"]


def test_analyze_json_imports_no_timeline_code_and_no_tracker_without_asking(tmp_path: Path) -> None:
    mods = _modules_after(tmp_path, "analyze", str(SAMPLE), "--format", "json", "-o", str(tmp_path / "r.json"))
    assert "gpuprof.analysis" in mods and "gpuprof.trace.critpath.path" in mods  # it ran, the critical path too
    assert [m for m in TIMELINE_CODE if m in mods] == []
    assert not _loaded(mods, "gpuprof.trackers")  # no --to: the trackers' registry is not read
    # the JSON writer's timeline tokens come from os.urandom: no secrets (hmac, hashlib, OpenSSL's constructors)
    assert [m for m in ("secrets", "hmac", "hashlib") if m in mods] == []


def test_the_timeline_code_is_still_imported_where_it_is_drawn(tmp_path: Path) -> None:
    for args in (["--timeline"], ["--html", str(tmp_path / "r.html")]):
        mods = _modules_after(tmp_path, "analyze", str(SAMPLE), "--format", "json", "-o", str(tmp_path / "r.json"),
                              *args)
        assert [m for m in TIMELINE_CODE if m not in mods] == [], args
