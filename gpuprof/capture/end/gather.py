"""Under torchrun: rank 0 gathers every rank's small summary and writes the cross-rank report.

No trace moves between machines: each rank analyses its own trace, then puts
its :class:`~gpuprof.distributed.summary.RankSummary` (a few KB, msgpack) in
the job's ``torch.distributed`` key-value store under a key of its run and
rank. ``set`` returns at once, so no rank ever waits for another; only rank 0
polls for the other ranks' keys, for at most ``GATHER_WAIT_S`` seconds, and
writes ``<run dir>/report.cross_rank.json`` and ``report.cross_rank.md``
with what arrived, once when the recorded window closes (from the window
report's background thread: the training loop never waits for it) and again
at the end of the run (``report.*`` names: ``gpuprof analyze <run dir>`` does not
take them for traces).
A rank that is dead, hung or captured nothing is named in the report's notes,
never waited on beyond that bound; so is a rank whose summary does not decode
or is not valid (another gpuprof version): the report is written for the
others. When the end-of-run gather cannot write (the process group was
destroyed first, a store error), the window's report, which said it would be
rewritten, is rewritten to say it was not and why. The store is the one every backend's
process group uses (NCCL jobs included), so no extra collective runs beside
the training's own.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import msgspec

from gpuprof.atomic import atomic_write
from gpuprof.distributed.summary import RankSummary
from gpuprof.flow import finish
from gpuprof.report import Report
from gpuprof.runner import Selection

__all__ = ["gather_cross_rank", "GATHER_WAIT_S"]

GATHER_WAIT_S = 30.0  # rank 0's longest wait for the other ranks' summaries (GPUPROF_GATHER_WAIT_S overrides)
_POLL_S = 0.2
# run dir -> (window step, the cross-rank report rank 0 wrote then), until the end-of-run one replaces it
_WINDOW_REPORTS: dict[str, tuple[int, Report]] = {}


def _store_and_group() -> tuple[Any, int, int] | None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    from torch.distributed import distributed_c10d

    store = distributed_c10d._get_default_store()  # the rendezvous store of the default group
    return store, dist.get_rank(), dist.get_world_size()


def _wait_s() -> float:
    import os

    try:
        return max(0.0, float(os.environ.get("GPUPROF_GATHER_WAIT_S", GATHER_WAIT_S)))
    except ValueError:
        return GATHER_WAIT_S


def gather_cross_rank(report: Report, run_dir: Path, run: str, wait_s: float | None = None, *,
                      window: int | None = None, selection: Selection | None = None,
                      options: Mapping[str, Mapping[str, Any]] | None = None) -> Path | None:
    """Share this rank's summary; on rank 0, merge what arrives within ``wait_s`` and write the cross-rank report.

    ``window``: the step at which the recorded window closed, for the gather
    made then (on the window report's background thread, while training goes
    on); None for the one at the end of the run, which rewrites the files.
    The two use different keys, so rank 0 never takes a rank's window summary
    for its end-of-run one. Returns the JSON path rank 0 wrote, else None.
    Raises on store errors (the caller's guard turns that into one warning).
    ``selection``/``options``: the capture's ``select=``/``ignore=`` and rule
    options; the findings are finished as every report's are
    (:func:`gpuprof.flow.finish`).
    """
    if window is not None:
        return _gather(report, run_dir, run, wait_s, window, selection, options)[0]
    try:
        path, why_not = _gather(report, run_dir, run, wait_s, None, selection, options)
    except BaseException as err:
        _window_stays(run_dir, f"the end-of-run gather failed ({type(err).__name__}: {' '.join(str(err).split())[:200]})")
        raise
    if path is None and why_not:
        _window_stays(run_dir, why_not)
    return path


def _gather(report: Report, run_dir: Path, run: str, wait_s: float | None, window: int | None,
            selection: Selection | None = None, options: Mapping[str, Mapping[str, Any]] | None = None,
            ) -> tuple[Path | None, str]:
    """The gather; (path written or None, why rank 0 wrote nothing: "" when it is not rank 0)."""
    import os

    mine = [s for sec in report.sections if getattr(sec, "kind", None) == "rank_summaries" for s in sec.summaries]
    ctx = _store_and_group()
    if ctx is None:
        rank0 = os.environ.get("RANK", "0") == "0"
        return None, "the process group was gone at the end of the run" if rank0 else ""
    store, rank, world = ctx
    if not mine:
        return None, "this rank had no summary at the end of the run" if rank == 0 else ""
    mine = [_with_series(mine[0], report)]
    wait_s = _wait_s() if wait_s is None else wait_s
    if world < 2:
        return None, ""
    # all ranks close the window at the same point of the schedule: one window key per run
    prefix = f"gpuprof/{run}/summary/" if window is None else f"gpuprof/{run}/window/summary/"
    store.set(f"{prefix}{rank}", msgspec.msgpack.encode(mine[0]))
    if rank != 0:
        return None, ""
    got: dict[int, RankSummary] = {0: mine[0]}
    bad: dict[int, str] = {}  # ranks whose summary arrived but cannot be used, and why
    deadline = time.monotonic() + wait_s
    while len(got) + len(bad) < world:
        for r in range(world):
            if r not in got and r not in bad and store.check([f"{prefix}{r}"]):
                _decode(r, store.get(f"{prefix}{r}"), got, bad)
        if len(got) + len(bad) == world or time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
    return _write(run_dir, got, world, wait_s, window, bad, selection, options), ""


def _with_series(summary: RankSummary, report: Report) -> RankSummary:
    """The summary with the watch's whole-job series of this rank (every step so far), for the straggler verdict
    from every step (gpuprof.distributed.series); as it was when the report has no watched job."""
    from gpuprof.distributed.series import series_of_job

    series = series_of_job(report.job) if report.job is not None else None
    return summary if series is None else msgspec.structs.replace(summary, series=series)


def _decode(rank: int, raw: bytes, got: dict[int, RankSummary], bad: dict[int, str]) -> None:
    """One rank's summary into ``got``, or why it cannot be used into ``bad`` (never an exception)."""
    from gpuprof.distributed.reports import problem_in
    from gpuprof.distributed.summary import SUMMARY_VERSION

    try:
        s = msgspec.msgpack.decode(raw, type=RankSummary)
    except RecursionError:
        bad[rank] = "its summary is nested too deep to be one gpuprof wrote"
        return
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        bad[rank] = f"its summary does not decode ({' '.join(str(err).split())[:120]}; another gpuprof version?)"
        return
    problem = (f"its summary is of version {s.version}, this gpuprof reads {SUMMARY_VERSION}"
               if s.version != SUMMARY_VERSION else problem_in(s))
    if problem is not None:
        bad[rank] = problem
    else:
        got[rank] = s


def _window_stays(run_dir: Path, reason: str) -> None:
    """The window's cross-rank report stays: rewrite its note, which promised the whole run, to say why not."""
    kept = _WINDOW_REPORTS.pop(str(run_dir), None)
    if kept is None:
        return
    step, out = kept
    out.notes = [n for n in out.notes if not n.startswith("gathered when")]
    out.notes.insert(0, f"gathered when the recorded window closed at step {step}; not rewritten with the whole "
                        f"run: {reason}")
    _files(run_dir, out)


def _write(run_dir: Path, got: dict[int, RankSummary], world: int, wait_s: float, window: int | None = None,
           bad: dict[int, str] | None = None, selection: Selection | None = None,
           options: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    from gpuprof.distributed.analysis import cross_rank

    summaries = [got[r] for r in sorted(got)]
    out = Report(command="analyze", inputs=[s.path for s in summaries])
    if window is not None:
        out.notes.append(f"gathered when the recorded window closed at step {window}, while the run goes on; "
                         "rewritten with the whole run when it ends")
    for r, why in sorted((bad or {}).items()):
        out.notes.append(f"rank {r} left out of the comparison: {why}")
    missing = [r for r in range(world) if r not in got and r not in (bad or {})]
    if missing:
        out.notes.append(f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} sent no summary "
                         f"within {wait_s:g} s (stopped, hung, or captured nothing): left out of the comparison")
    if len(summaries) >= 2:
        failures: list[Any] = []
        sel = selection or Selection()
        section, found = cross_rank(summaries, options, sel.select, sel.ignore, failures=failures)
        out.sections.append(section)
        out.findings = finish(found, sel)
        out.failed_rules = [c for c, _ in failures]
    from gpuprof.capture.job.hangcross import add_to_report

    add_to_report(out, run_dir, world)  # a hang the ranks' watchdogs wrote (hang.json) stays in this report
    if window is not None:
        _WINDOW_REPORTS[str(run_dir)] = (window, out)
    else:
        _WINDOW_REPORTS.pop(str(run_dir), None)  # the whole run's report replaces the window's
    return _files(run_dir, out)


def _files(run_dir: Path, out: Report) -> Path:
    from gpuprof.render import render
    from gpuprof.render.jsonout import render_json

    path = run_dir / "report.cross_rank.json"
    atomic_write(path, render_json(out))
    atomic_write(run_dir / "report.cross_rank.md", render(out, "markdown"))
    return path
