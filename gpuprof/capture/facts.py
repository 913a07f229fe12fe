"""Build the frozen run object (:class:`~gpuprof.capture.run.RunFacts`) from the live session.

Runs on the driving thread, where it may touch torch and the state the loop
keeps changing: the runtime checks' findings, the torch settings, the step
times, the files written so far. Everything after it reads the copy.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuprof.capture.checks import Live, LoaderCheck, MemoryCheck, SettingsCheck
from gpuprof.capture.config import Schedule
from gpuprof.capture.end.text import no_steps_text
from gpuprof.capture.run import LEAK_STATEMENTS, CaptureSection, LeakLines, RunFacts, TraceFile
from gpuprof.findings import Finding
from gpuprof.trace.dataloading import data_loading_share

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.end.analyse import TraceResults
    from gpuprof.capture.job.phases import WatchData
    from gpuprof.capture.leaklines import StatementSite

__all__ = ["run_facts", "runtime_findings"]


def runtime_findings(live: Live) -> list[Finding]:
    """All GP6xx findings of the run so far: those found outside the checks, then each check's, in order."""
    cfg = live.config
    out = list(live.findings)
    if cfg.checks:
        for m in live.monitors:
            out += live.guard.run(m.part, m.consequence, m.findings, live) or []
    return out  # select=/ignore= apply once, where the report is finished (gpuprof.flow.finish)


def run_facts(live: Live, written: Sequence[TraceFile], *, tensorboard: bool, leak_lines: LeakLines | None = None,
              previous: TraceResults | None = None) -> RunFacts:
    """Copy what the report needs from the live session; ``written``: the traces exported so far.

    ``leak_lines`` (the end of the run): the window's walk for GP640's statement
    (:meth:`~gpuprof.capture.window.TraceWindow.leak_statements`), made only when
    a memory growth was found or may be (``previous``: the window report's
    trace results, when they cover the same traces).
    """
    g, cfg = live.guard, live.config
    traces = tuple(t for t in written if t.path.exists())
    runtime = g.run("runtime checks", "no runtime findings", runtime_findings, live) or []
    statements: tuple[StatementSite, ...] = ()
    if leak_lines is not None:
        known = previous is not None and previous.trace_paths == [str(t.path) for t in traces]
        grows = any(f.code == "GP640" for f in runtime) or bool(known and previous and previous.cpu_growth)
        if grows or known:  # else the end-of-run report walks them once the traces say whether memory grew
            statements = g.run(LEAK_STATEMENTS, "a memory-growth finding names the function's first line",
                               leak_lines, grows) or ()
    settings = live.find(SettingsCheck)
    s = settings.settings if settings is not None else None
    conv, stable = False, None
    if cfg.checks and settings is not None and s is not None and s.cuda:
        conv = bool(g.run("settings checks", "no settings findings", settings.roots_have_conv, live))
        stable = settings.shapes_stable(live)
    loaders = live.find(LoaderCheck)
    batches = loaders.monitor.batches if loaders is not None else 0
    notes = list(g.notes)
    if not g.ok("trace export"):  # the disk filled, the directory went: not "pass a shorter schedule"
        notes.append(f"the trace export failed ({g.failed['trace export']}): "
                     + ("no trace was written" if not written else
                        "the traces exported before it are analysed, the recording that failed is lost"))
    elif not written and live.step_s and live.paths is not None and g.ok("profiler"):
        notes.append(_no_trace_note(live))
    if not live.step_s and batches:
        notes.append(no_steps_text(batches))
    mem = live.find(MemoryCheck)
    p = live.paths
    return RunFacts(
        steps=len(live.step_s), traces=traces, runtime=tuple(runtime),
        section=_section(live, written, traces, tensorboard), notes=tuple(notes), config=cfg, settings=s,
        roots_have_conv=conv, shapes_stable=stable, tensorboard=tensorboard, cuda=live.cuda, location=live.location,
        report_json=str(p.report_json) if p else None, report_md=str(p.report_md) if p else None,
        out_dir=str(p.out_dir) if p else None, run_dir=str(p.run_dir) if p else None, worker=p.worker if p else "",
        rank=live.ranks.rank, distributed=bool(live.ranks.distributed),
        files=tuple(mem.files()) if mem is not None else (), statements=statements,
        watch=g.run("watch", "no job timeline in the report", _watch_data, live, written))


def _section(live: Live, written: Sequence[TraceFile], traces: tuple[TraceFile, ...],
             tensorboard: bool) -> CaptureSection:
    p = live.paths
    steps = len(live.step_s)
    mem = live.find(MemoryCheck)
    sampler = mem.sampler if mem is not None else None
    series = sampler.series() if sampler is not None else []
    loaders = live.find(LoaderCheck)
    seen = loaders is not None and loaders.monitor.seen
    return CaptureSection(
        logdir=str(p.logdir) if p else live.config.logdir, run_dir=str(p.run_dir) if p else "",
        out_dir=str(p.out_dir) if p else "", worker=p.worker if p else "", rank=live.ranks.rank, steps=steps,
        step_time_median_ms=statistics.median(live.step_s) * 1000 if steps else None,
        data_loading_share=data_loading_share(sum(live.fetch_s), sum(live.step_s)) if seen else None,
        recorded_steps=[[t.first_step, t.last_step] for t in written],
        traces=[str(t.path) for t in traces],
        memory_snapshots=mem.snapshots() if mem is not None else [],
        oom_files=mem.oom_files() if mem is not None else [],
        tensorboard_dir=str(p.logdir) if (p and tensorboard) else None,
        memory_series=sampler.kind if sampler is not None else None,
        memory_first_mib=series[0] / 2**20 if series else None,
        memory_last_mib=series[-1] / 2**20 if series else None,
    )


def _watch_data(live: Live, written: Sequence[TraceFile]) -> WatchData | None:
    from gpuprof.capture.checks.watch import WatchCheck

    watch = live.find(WatchCheck)
    if watch is None:
        return None
    mem = live.find(MemoryCheck)
    s = mem.sampler if mem is not None else None
    loaders = live.find(LoaderCheck)
    return watch.data(live, (s.allocated, s.reserved, s.peak) if s is not None and s.cuda else None,
                      loaders is not None and loaders.monitor.seen,
                      tuple(i for t in written for i in range(t.first_step, t.last_step + 1)),
                      (s.rss_steps, s.rss) if s is not None and len(s.rss) else None)


def _no_trace_note(live: Live) -> str:
    sched = live.config.schedule
    where = f" ({sched.describe()})" if isinstance(sched, Schedule) else ""
    return (f"the loop ended after {len(live.step_s)} steps, before the schedule recorded a step{where}: "
            "no trace was written; pass a shorter schedule, e.g. gpuprof.capture.Schedule(wait=1, warmup=1, "
            "active=3)")
