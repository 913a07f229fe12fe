"""The analysis pipeline: files → trace model → metrics → rules → report.

``analyze(path)`` is what ``gpuprof analyze`` and the capture side call. It
needs no torch and no GPU.
"""

from __future__ import annotations

import gc
import os
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from gpuprof.capturerun import capture_findings_of
from gpuprof.errors import InputError, RuleError, describe_error
from gpuprof.findings import Finding, sort_findings
from gpuprof.flow import finish
from gpuprof.inputs import is_report_file
from gpuprof.redact import scrub
from gpuprof.remote import TraceFile
from gpuprof.report import Report, TraceSummary
from gpuprof.rules.base import Rule, RuleContext, all_rules
from gpuprof.rules.replayed import cross_rank_not_replayed, with_what_if
from gpuprof.runner import STRICT_ENV, RuleFailure, RuleUnit, Selection, strict_rules
from gpuprof.runner import run_rules as run_units
from gpuprof.summarize import trace_summary
from gpuprof.trace.critpath.graph import build_graph
from gpuprof.trace.load import load_trace
from gpuprof.trace.metrics import TraceMetrics, compute_metrics
from gpuprof.trace.model import Trace
from gpuprof.trace.phase import compile_time, trace_phase
from gpuprof.trace.source import find_traces

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.cluster import Scheduler

__all__ = ["analyze", "analyze_trace", "run_rules"]

COMPILE_NOTE_US = 1000.0  # compilation in a trace without step markers said in its notes from this much (GP811's default)

ProgressFactory = Callable[[TraceFile], "Callable[[int, int], None] | None"]


def run_rules(
    trace: Trace,
    metrics: TraceMetrics,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    failures: list[RuleFailure] | None = None,
) -> list[Finding]:
    """Every registered trace rule that ``select``/``ignore`` wants, by the one runner (:func:`gpuprof.flow.run_rules`).

    The failure policy is the runner's: every rule runs; then, without a
    ``failures`` list or in strict mode, :class:`~gpuprof.errors.RuleError`
    names every rule that raised; with one, ``(code, exception)`` is appended
    to it. The findings are not yet finished (:func:`gpuprof.flow.finish`).
    """
    wanted = Selection.of(select, ignore)
    options = options or {}
    chosen = [r for r in all_rules() if wanted.wants(r.code)]
    all_opts = {r.code: {**r.defaults(), **dict(options.get(r.code, {}))} for r in chosen}

    def unit(rule_cls: type[Rule]) -> RuleUnit:
        opts = all_opts[rule_cls.code]
        others = {c: o for c, o in all_opts.items() if c != rule_cls.code}
        return RuleUnit(rule_cls.code, opts, lambda: rule_cls().check(RuleContext(trace, metrics, opts, others)))

    return run_units([unit(r) for r in chosen], trace.path, failures)


def analyze_trace(
    trace: Trace,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    failures: list[RuleFailure] | None = None,
    *,
    metrics: TraceMetrics | None = None,
    rank_summaries: list[Any] | None = None,
    timeline: bool = True,
) -> tuple[TraceSummary, list[Finding]]:
    """Metrics and findings of one loaded trace (``metrics``: its metrics, when computed already).

    ``metrics``: the trace's :func:`compute_metrics`, when the caller already
    has them (the TensorBoard plugin keeps them for its per-step charts).

    With a ``rank_summaries`` list, the trace's
    :class:`~gpuprof.distributed.summary.RankSummary` is appended to it (the
    cross-rank merge's input).

    ``timeline``: build the summary's timeline (``traces[].timeline``, what the
    ``--html`` page and the TensorBoard tab draw); without it the summary's
    timeline is ``None`` and none of the timeline's code runs (``gpuprof
    analyze`` builds it only for ``--html`` or ``--timeline``). The step graph
    (the critical path's, the what-if's and the timeline's) is dropped from the
    metrics once they are done with it.

    Rules that raise: without a ``failures`` list, every rule still runs and
    then :class:`~gpuprof.errors.RuleError` names all that failed; with one,
    they are appended to it and the trace's notes say the analysis is
    incomplete. The findings are sorted but not finished: the report they go
    into finishes them once (:func:`gpuprof.flow.finish`).
    """
    if metrics is None:
        metrics = compute_metrics(trace)
    summary = trace_summary(metrics)
    if rank_summaries is not None or summary.breakdown_us.get("communication", 0.0) > 0:
        from gpuprof.distributed.summary import summarize
        from gpuprof.distributed.waiting import apply_waits, trace_waits

        rank = summarize(metrics)
        if rank_summaries is not None:
            rank_summaries.append(rank)
        if rank.inst_dur:  # collectives: the one-rank estimate of their waiting (the cross-rank merge refines it)
            apply_waits(summary, rank, trace_waits(rank), "trace")
    failed: list[RuleFailure] = []
    findings = with_what_if(metrics, run_rules(trace, metrics, options, select, ignore, failed))
    if failed:
        if failures is None:
            raise RuleError(trace.path, failed) from failed[0][1]
        failures.extend(failed)
        for code, err in failed:
            summary.notes.append(f"rule {code} failed ({describe_error(err)}): the analysis of this trace is incomplete")
    summary.notes.extend(trace.load_notes)
    if timeline:
        # the timeline, with the critical path's segments of the median step (lane, start_us, end_us, kind, name) in
        # the trace's clock; both pick the same median step (gpuprof.views.timeline.critical_step), and the step
        # graph is built once for the critical path and these segments (TraceMetrics.memo)
        from gpuprof.trace.critpath.path import critical_segments
        from gpuprof.views.timeline import build_timeline  # only where a view draws it: ~0.15 s and ~40 MB at 200 MB

        summary.timeline = build_timeline(metrics, findings, critical_segments(metrics))
    metrics.forget(build_graph)  # the critical path, the what-if and the timeline are done with the step graph
    phase = trace_phase(metrics)
    if phase is not None:
        summary.notes.append(
            f"this trace records a CUDA/HIP graph capture pass ({phase.share:.0%} of its time in capture: {phase.marker}): "
            "kernels are recorded into a graph, not run, so its GPU utilisation, syncs and graph instantiation are not "
            "those of the steps that replay the graph (profile replayed steps for those); GP101, GP203 and GP205 are "
            "left out")
    compiling = compile_time(metrics)
    if compiling >= COMPILE_NOTE_US and not metrics.has_step_markers:  # with markers, GP811 says where
        summary.notes.append(
            f"this trace records torch.compile compiling ({compiling / 1000:.3g} ms of Dynamo/Inductor phases and "
            "CUDA-graph recording): "
            "a warm-up trace, not steady-state steps (GP811)")
    if not metrics.has_step_markers and metrics.steps:
        note = "no ProfilerStep# markers: the whole trace is treated as one step"
        if metrics.lead_in_us:
            note += " (after its lead-in, the time before the first GPU work)"
        summary.notes.append(note)
    return summary, sort_findings(findings)


def analyze(
    path: str | os.PathLike[str] | list[str],
    *,
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    progress: ProgressFactory | None = None,
    failures: list[RuleFailure] | None = None,
    jobs: int | None = 1,
    dask: Scheduler | None = None,
    on_rank_done: Callable[[int, int], None] | None = None,
    timeline: bool = True,
) -> Report:
    """Analyse a trace file, or every trace under a directory, into one Report.

    ``path`` may be a list (the ranks of one job); among several paths, a
    JSON report gpuprof wrote contributes its rank summaries (a per-node
    analysis merged later). Traces of two or more ranks add a ``cross_rank``
    section and the GP7xx findings. ``jobs`` > 1 analyses several traces in
    that many processes at once (no progress bars then); ``None``: as many
    as pay for themselves (:func:`gpuprof.pool.workers_for`). ``dask``: a Dask
    scheduler address or ``distributed.Client``: each trace is analysed on a
    cluster worker that reads it itself (see :mod:`gpuprof.cluster`);
    ``on_rank_done(done, total)`` follows its progress. A path may be a URL
    or a URL glob (see :mod:`gpuprof.remote`). ``timeline``: each trace's
    timeline in the report (:func:`analyze_trace`; off, the analysis is cheaper).

    Raises :class:`gpuprof.errors.InputError` for unusable input.
    A rule that raises: without ``failures`` (the command line),
    :class:`gpuprof.errors.RuleError` (exit 3) once the trace's other rules
    have run. With a ``failures`` list (the capture side, which must not
    stop), ``(code, exception)`` is appended to it and the report is returned
    with the codes in ``report.failed_rules`` and a note per failure, so it
    never reads as a clean "no findings".
    """
    # The analysis allocates millions of short tuples and no reference cycles worth
    # collecting; the cyclic GC's repeated full passes over them cost ~10% of the run.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _analyze(path, list(select), list(ignore), options, progress, failures, jobs, dask, on_rank_done,
                        timeline)
    finally:
        if gc_was_enabled:
            gc.enable()


def _analyze(
    path: str | os.PathLike[str] | list[str],
    select: list[str],
    ignore: list[str],
    options: Mapping[str, Mapping[str, Any]] | None,
    progress: ProgressFactory | None,
    failures: list[RuleFailure] | None,
    jobs: int | None = 1,
    dask: Scheduler | None = None,
    on_rank_done: Callable[[int, int], None] | None = None,
    timeline: bool = True,
) -> Report:
    paths = [os.fspath(p) for p in path] if isinstance(path, list) else [os.fspath(path)]
    report = Report(command="analyze", inputs=paths)  # Report masks a URL's credentials (gpuprof.redact)
    ranks: list[Any] = []
    files: list[TraceFile] = []
    taken: dict[int, str] = {}  # rank -> the node report that brought it (a rank twice is refused)
    for p in paths:  # several paths: the ranks of one job; JSON reports bring their rank summaries
        if len(paths) > 1 and is_report_file(p):
            from gpuprof.distributed.reports import summaries_from_report

            ranks.extend(summaries_from_report(p, taken))
        else:
            files.extend(find_traces(p))
    from_reports = len(ranks)
    errors: list[InputError] = []
    results: list[Any] | None = None
    workers = 1  # one trace never needs a pool (gpuprof.pool.workers_for says so): its module is not imported
    if dask is None and len(files) > 1:
        from gpuprof.pool import workers_for

        workers = workers_for(files, jobs)
    if dask is not None and files:
        from gpuprof.cluster import run_on_dask

        results = run_on_dask(dask, files, _analyze_one, (dict(options or {}), select, ignore, timeline),
                              on_rank_done)
    elif workers > 1:
        try:
            results = _run_parallel(files, options, select, ignore, workers, timeline)
        except (OSError, RuntimeError) as err:  # BrokenProcessPool is a RuntimeError: the files are read here instead
            report.notes.append(f"the parallel analysis stopped ({describe_error(err)}); the traces were analysed one by one")
    for i, f in enumerate(files):
        try:
            if results is not None:
                res = results[i]
                if isinstance(res, InputError):
                    raise res
                from gpuprof.cluster import RankFailure  # only with a pool's or a cluster's results: not for one trace

                if isinstance(res, RankFailure):
                    report.notes.append(f"rank trace {scrub(res.path)} failed on the cluster after a retry "
                                        f"({scrub(res.reason)}): left out of the report")
                    report.failed_ranks.append(scrub(res.path))
                    continue
                summary, findings, rank, failed_text = res
                failed: list[RuleFailure] | None = [(code, RuntimeError(text)) for code, text in failed_text]
                if failed and (failures is None or strict_rules()):
                    raise RuleError(f, failed)
            else:
                cb = progress(f) if progress is not None else None
                trace = load_trace(f, progress=cb)
                failed = None if failures is None else []
                got: list[Any] = []
                summary, findings = analyze_trace(trace, options, select, ignore, failed, rank_summaries=got,
                                                  timeline=timeline)
                rank = got[0]
                del trace  # only the summaries and findings outlive the trace
        except InputError as err:
            if len(files) == 1 and not from_reports:
                raise
            # In a directory, one unreadable file is skipped (and said), not fatal.
            errors.append(err)
            report.notes.append(f"skipped {err}")
            continue
        if failed:
            assert failures is not None
            failures.extend(failed)
            report.failed_rules += [code for code, _ in failed if code not in report.failed_rules]
        ranks.append(rank)
        report.traces.append(summary)
        report.findings.extend(findings)
    if not report.traces and not from_reports:
        raise InputError(paths[0], f"no readable trace ({len(errors)} files failed; first: {errors[0].problem})")
    _cross_rank(report, ranks, options, select, ignore, failures)
    # a capture's run directory: its runtime findings (GP6xx) were measured live, not in the traces
    for p in paths:
        report.findings += capture_findings_of(report, p)
    # the one boundary: --select/--ignore, the overlap policy, links, order
    report.findings = finish(report.findings, Selection.of(select, ignore))
    if any(t.timeline is not None for t in report.traces):
        from gpuprof.views.timeline import keep_markers_of

        keep_markers_of(report.traces, report.findings)  # a finding the policy absorbed or --ignore dropped: no marker
    return report


def _cross_rank(
    report: Report,
    ranks: list[Any],
    options: Mapping[str, Mapping[str, Any]] | None,
    select: list[str],
    ignore: list[str],
    failures: list[RuleFailure] | None,
) -> None:
    """The rank summaries of a job's ranks as a section, and the cross-rank view once two ranks are there."""
    # a rank of a job: a rank number (trace or file name), and not a one-process "job"
    job = [r for r in ranks if r.rank is not None and (r.world_size is None or r.world_size > 1)]
    if not job:
        return
    from gpuprof.distributed.analysis import cross_rank  # a job's ranks only: one trace never needs the merge
    from gpuprof.distributed.reports import RankSummaries
    report.sections.append(RankSummaries(job))
    if len({r.rank for r in job}) < 2:
        if len(job) > 1:  # several summaries, one rank: never a silent "no cross-rank section"
            report.notes.append(
                f"no cross-rank comparison: the {len(job)} rank summaries all hold rank {job[0].rank} (the same "
                "rank analysed twice, or node reports of one rank); merge the reports of different ranks")
        return
    _rank_waits(report, job)
    failed: list[RuleFailure] | None = None if failures is None else []
    section, found = cross_rank(job, options, select, ignore, failed)
    report.sections.insert(len(report.sections) - 1, section)
    report.findings.extend(cross_rank_not_replayed(found))
    if failed:
        assert failures is not None
        failures.extend(failed)
        report.failed_rules += [code for code, _ in failed if code not in report.failed_rules]
        report.notes += [f"rule {code} failed ({describe_error(err)}): the cross-rank analysis is incomplete" for code, err in failed]


def _run_parallel(
    files: list[TraceFile],
    options: Mapping[str, Mapping[str, Any]] | None,
    select: list[str],
    ignore: list[str],
    jobs: int,
    timeline: bool = True,
) -> list[Any]:
    """Each file analysed in its own process (at most ``jobs`` at once); results in file order.

    Memory: at most ``jobs`` traces are loaded at a time; only their summaries
    and findings come back.
    """
    from gpuprof.pool import run_pool

    # the pool used only where it pays, workers joined, none left behind if this process is killed: gpuprof.pool
    return run_pool(_analyze_one, files, jobs, (dict(options or {}), select, ignore, timeline))


def _analyze_one(f: TraceFile, options: Mapping[str, Mapping[str, Any]], select: list[str], ignore: list[str],
                 timeline: bool = True) -> Any:
    """One file in a worker process: (trace summary, findings, rank summary, [(code, error text)]) or the InputError.

    Rule failures come back as text (the parent raises RuleError or records them, as without a pool).
    """
    os.environ.pop(STRICT_ENV, None)  # collected here, judged by the parent
    try:
        trace = load_trace(f)
    except InputError as err:
        return err
    failed: list[RuleFailure] = []
    got: list[Any] = []
    summary, findings = analyze_trace(trace, options, select, ignore, failed, rank_summaries=got, timeline=timeline)
    return summary, findings, got[0], [(code, describe_error(err)) for code, err in failed]


def _rank_waits(report: Report, job: list[Any]) -> None:
    """Each rank trace's waiting in collectives by the cross-rank estimate (gpuprof.distributed.waiting)."""
    from gpuprof.distributed.waiting import apply_waits, rank_waits

    by_path = {t.path: t for t in report.traces}
    for s, waits in zip(job, rank_waits(job), strict=True):
        t = by_path.get(scrub(s.path))
        if t is not None and s.inst_dur:
            apply_waits(t, s, waits, "ranks")
