"""End of a capture: checks, trace analysis, TensorBoard, report files, the printed summary.

Runs when the schedule's last recorded window closes, on a background thread
(:func:`run_facts` on the training thread copies the live state first; then
:func:`trace_results`, :func:`assemble` and :func:`publish` read files and
those copies only), and again from ``Profiler.stop()`` for the whole run,
reusing the trace results. Each part is guarded: a failure is a warning
(from the background thread, replayed on the training thread) and the
remaining parts still run. The analyzer is the one behind
``gpuprof analyze``; its findings are merged with the runtime ones (GP6xx),
and where two codes report one problem the registry's overlap policy folds
one into the other (:func:`gpuprof.codes.apply_overlaps`, docs/codes.md).
"""

from __future__ import annotations

import os
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprof.atomic import atomic_write
from gpuprof.capture.dataloader import data_loading_share
from gpuprof.capture.result import CaptureResult, RecordedTrace, WindowReport
from gpuprof.findings import Finding, Severity, filter_findings, sort_findings
from gpuprof.render.markdown import md_code, md_escape
from gpuprof.render.safe import one_line, visible
from gpuprof.render.sections import register_section
from gpuprof.report import Report

if TYPE_CHECKING:  # pragma: no cover
    from gpuprof.capture.session import Profiler

__all__ = ["CaptureSection", "RunFacts", "TraceResults", "assemble", "finish", "findings_markdown",
           "make_result", "publish", "run_facts", "short_report", "trace_results"]



@dataclass
class CaptureSection:
    """What the capture did: where its files are and the per-step numbers it measured."""

    kind: str = "capture"
    logdir: str = ""
    run_dir: str = ""
    out_dir: str = ""
    worker: str = ""
    rank: int | None = None
    steps: int = 0
    step_time_median_ms: float | None = None
    data_loading_share: float | None = None
    recorded_steps: list[list[int]] = field(default_factory=list)  # [first, last] per trace
    traces: list[str] = field(default_factory=list)
    memory_snapshots: list[str] = field(default_factory=list)
    oom_files: list[str] = field(default_factory=list)
    tensorboard_dir: str | None = None
    memory_series: str | None = None  # "cuda" or "host_rss"
    memory_first_mib: float | None = None
    memory_last_mib: float | None = None
    failures: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("kind")
        return d


def _section_markdown(sec: CaptureSection) -> str:
    # paths hold the worker name (host name, user-set) and may hold anything: code spans, visible controls
    lines = ["## Capture", ""]
    lines.append(f"- run directory: {md_code(sec.run_dir)}")
    if sec.steps:
        med = f", median step {sec.step_time_median_ms:.2f} ms" if sec.step_time_median_ms is not None else ""
        lines.append(f"- steps: {sec.steps}{med}")
    if sec.data_loading_share is not None:
        lines.append(f"- data loading: {sec.data_loading_share:.1%} of step time")
    for t, rng in zip(sec.traces, sec.recorded_steps):
        lines.append(f"- trace (steps {rng[0]}-{rng[1]}): {md_code(t)}")
    for s in sec.memory_snapshots:
        lines.append(f"- memory snapshot: {md_code(s)} ({md_code('gpuprof memory ' + shlex.quote(s))})")
    for s in sec.oom_files:
        lines.append(f"- out-of-memory dump: {md_code(s)}")
    if sec.tensorboard_dir:
        lines.append(f"- TensorBoard: {md_code('tensorboard --logdir ' + shlex.quote(sec.tensorboard_dir))}")
    for part, why in sec.failures.items():
        lines.append(f"- {md_escape(part)} failed: {md_escape(why)}")
    return "\n".join(lines) + "\n"


register_section("capture", markdown=_section_markdown)


# ---------------------------------------------------------------------- the pipeline


@dataclass
class RunFacts:
    """What the report needs from the live session, copied on the driving thread.

    Everything that touches torch or state the training loop keeps changing
    (step times, DataLoader records, the modules) is read here, with the
    configuration and the output paths, so the rest of the pipeline
    (:func:`trace_results`, :func:`assemble`, and what :func:`publish` writes
    and prints) reads files and these copies only and can run on a
    background thread. Still read from the profiler, after this: its sinks
    (the TensorBoard writer and its buffered scalars, the output stream, the
    reports kept for :func:`make_result`), and :func:`make_result` itself,
    which lists the files the capture wrote once it has stopped.
    """

    steps: int
    trace_paths: list[str]
    traces: list[Any]  # TraceFile objects of those paths
    runtime: list[Finding]
    section: CaptureSection
    notes: list[str]
    settings: Any = None  # gpuprof.capture.settings.Settings of the first step
    roots_have_conv: bool = False
    shapes_stable: bool | None = None
    tensorboard: bool = False  # a TensorBoard writer is open (the traces' GPU utilisation goes there)
    config: Any = None  # the session's CaptureConfig (fixed when the capture starts; read only)
    cuda: bool = False  # the capture measures CUDA (else the host)
    location: Any = None  # SourceLocation of the user's loop, for findings without a better place
    report_json: str | None = None  # where report.json/report.md go; None without an output directory
    report_md: str | None = None
    out_dir: str | None = None
    distributed: bool = False  # one rank of several (the final report gathers the cross-rank view)


@dataclass
class TraceResults:
    """What the traces say; computed once per set of traces (reads files only, no torch)."""

    trace_paths: list[str]
    analysed: Report | None = None
    rule_failures: list[Any] = field(default_factory=list)  # (code, exception) of each rule that raised
    op_facts: dict[str, Any] | None = None
    cpu_growth: list[Finding] = field(default_factory=list)
    gpu_util: dict[int, float] | None = None
    leak_site: Any = None  # capture.memory.LeakSite of the CUDA memory growth (GP640), from the traces


def finish(prof: "Profiler") -> Report:
    """The end-of-run report, on the driving thread (traces analysed at the window's end are reused)."""
    g = prof.guard
    facts = run_facts(prof)
    res = prof._trace_results
    if res is None or res.trace_paths != facts.trace_paths:
        res = prof._trace_results = trace_results(facts, g)
    report = assemble(facts, res, g)
    publish(prof, facts, report, g, final=True)
    return report


def make_result(prof: "Profiler", report: Report | None) -> CaptureResult:
    """The plain :class:`~gpuprof.capture.result.CaptureResult` of the capture, from ``report`` (the final
    one, or None when no report could be made) and the window report published before it."""
    sec = _capture_section(report) if report is not None else None
    reports = list(prof._published)
    traces = tuple(RecordedTrace(path=str(t.path), first_step=t.first_step, last_step=t.last_step,
                                 memory_snapshot=str(t.snapshot) if t.snapshot is not None else None)
                   for t in prof.traces)
    files: list[str] = []
    for t in prof.traces:
        files.append(str(t.path))
    files += [str(s) for s in (prof.history.snapshots if prof.history else [])]
    files += [str(x) for pair in (prof.oom.dumped if prof.oom else []) for x in pair]
    if prof.writer is not None:
        files.append(prof.writer.path)
    if prof.paths is not None:
        files += [str(f) for f in (prof.paths.report_json, prof.paths.report_md) if f.exists()]
    runtime = tuple(f for f in (report.findings if report is not None else prof.findings) if f.origin == "runtime")
    p = prof.paths
    return CaptureResult(
        run_dir=str(p.run_dir) if p else None, out_dir=str(p.out_dir) if p else None,
        worker=p.worker if p else "", rank=prof.ranks.rank, steps=len(prof.step_s),
        step_time_median_ms=sec.step_time_median_ms if sec else None,
        data_loading_share=sec.data_loading_share if sec else None,
        traces=traces, files=tuple(dict.fromkeys(f for f in files if os.path.exists(f))),
        reports=tuple(reports), runtime_findings=runtime, warnings=tuple(prof.guard.warned),
        inactive=prof.inactive,
    )


def _capture_section(report: Report) -> CaptureSection | None:
    return next((s for s in report.sections if getattr(s, "kind", None) == "capture"), None)


def preload() -> None:
    """Import what the report thread needs, on the driving thread (see Profiler._start_window_report)."""
    import gpuprof.analysis  # noqa: F401
    import gpuprof.capture.gather  # noqa: F401 - the window's cross-rank gather under torchrun
    import gpuprof.capture.memory  # noqa: F401
    import gpuprof.capture.settings  # noqa: F401
    import gpuprof.distributed.analysis  # noqa: F401
    import gpuprof.render.jsonout  # noqa: F401
    import gpuprof.trace.load  # noqa: F401
    import gpuprof.trace.metrics  # noqa: F401

    try:
        import gpuprof.render  # noqa: F401
    except ModuleNotFoundError:  # the markdown renderer ships separately; _write_reports falls back
        return


def run_facts(prof: "Profiler") -> RunFacts:
    """Copy what the report needs from the session (driving thread: may touch torch)."""
    g = prof.guard
    cfg = prof.config
    traces = [t for t in prof.traces if t.path.exists()]
    trace_paths = [str(t.path) for t in traces]
    runtime = g.run("runtime checks", "no runtime findings", prof.runtime_findings) or []
    s = prof.settings
    conv, stable = False, None
    if cfg.checks and s is not None and s.cuda:
        conv = bool(g.run("settings checks", "no settings findings", _roots_have_conv, prof))
        stable = _shapes_stable(prof)
    notes = list(g.notes)
    if not g.ok("trace export"):  # the disk filled, the directory went: not "pass a shorter schedule"
        notes.append(f"the trace export failed ({g.failed['trace export']}): "
                     + ("no trace was written" if not prof.traces else
                        "the traces exported before it are analysed, the recording that failed is lost"))
    elif not prof.traces and prof.step_s and prof.paths is not None and g.ok("profiler"):
        notes.append(_no_trace_note(prof))
    if not prof.step_s and prof.loaders.batches:
        notes.append(no_steps_text(prof.loaders.batches))
    p = prof.paths
    return RunFacts(steps=len(prof.step_s), trace_paths=trace_paths, traces=traces, runtime=runtime,
                    section=_section(prof, trace_paths), notes=notes, settings=s, roots_have_conv=conv,
                    shapes_stable=stable, tensorboard=prof.writer is not None, config=cfg, cuda=bool(prof.cuda),
                    location=prof.location, report_json=str(p.report_json) if p else None,
                    report_md=str(p.report_md) if p else None, out_dir=str(p.out_dir) if p else None,
                    distributed=bool(prof.ranks.distributed))


def no_steps_text(batches: int) -> str:
    return (f"the DataLoader monitor saw {batches} batch{'es' if batches != 1 else ''} but no step was marked, so "
            "nothing was recorded or checked: call prof.step() once per training iteration (or decorate the "
            "train-step function with @gpuprof.profile_step)")


def trace_results(facts: RunFacts, g: Any) -> TraceResults:
    """Analyse the traces: the analyzer's rules, the settings facts, memory growth, GPU utilisation.

    Each trace is loaded once and its metrics computed once; every consumer
    (the rules, the settings facts, the CPU memory series, the leak site,
    the GPU utilisation scalars) reads that one :class:`~gpuprof.trace.model.Trace`.
    Reads the trace files and ``facts`` only (never torch, never the
    profiler), so it runs on the background report thread.
    """
    cfg = facts.config
    res = TraceResults(trace_paths=list(facts.trace_paths))
    wants_util = facts.tensorboard and bool(facts.trace_paths)
    cpu_growth = cfg.checks and not facts.cuda and cfg.profile_memory
    cuda_leak = any(_is_cuda_growth(f) for f in facts.runtime)
    if cfg.analyze and facts.trace_paths:
        res.analysed = Report(command="capture")
    for tf in facts.traces:
        loaded = g.run("trace analysis", "the report holds the runtime checks only", _load, tf.path)
        if loaded is None:
            continue
        trace, metrics = loaded
        if res.analysed is not None:
            g.run("trace analysis", "the report holds the runtime checks only", _analyze_one, trace, metrics, cfg,
                  res.analysed, res.rule_failures)
        if cfg.checks and facts.settings is not None and facts.settings.cuda:
            from gpuprof.capture.settings import trace_op_facts

            op = g.run("settings checks", "no settings findings", trace_op_facts, [trace])
            if op is not None:
                res.op_facts = op if res.op_facts is None else {
                    "has_conv": res.op_facts["has_conv"] or op["has_conv"],
                    "fp32_matmuls": res.op_facts["fp32_matmuls"] + op["fp32_matmuls"]}
        if cpu_growth and not res.cpu_growth:
            res.cpu_growth = g.run("memory growth check", "no memory-growth finding", _cpu_growth, facts, trace,
                                   metrics, g) or []
        if cuda_leak and res.leak_site is None:
            from gpuprof.capture.memory import leak_site

            res.leak_site = g.run("leak site", "the memory-growth finding points at the capture", leak_site,
                                  trace, 1)
        if wants_util:
            util = g.run("GPU utilisation scalars", "no GPU utilisation in TensorBoard", _gpu_utilization_per_step,
                         metrics) or {}
            res.gpu_util = {**(res.gpu_util or {}), **util}
        del trace  # only the results outlive the trace
    return res


def _is_cuda_growth(f: Finding) -> bool:
    return f.code == "GP640" and bool(f.evidence) and f.evidence[0].extra.get("series") == "cuda"


def _load(path: Path) -> tuple[Any, Any]:
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    trace = load_trace(path)
    return trace, compute_metrics(trace)


def assemble(facts: RunFacts, res: TraceResults, g: Any) -> Report:
    """The merged report from the copied facts and the trace results (any thread)."""
    cfg = facts.config
    report = Report(command="capture", inputs=list(facts.trace_paths))
    runtime = list(facts.runtime)
    if res.leak_site is not None:  # the CUDA growth measured per step, pointed at its line by the traces
        from gpuprof.capture.memory import with_leak_site

        runtime = [with_leak_site(f, res.leak_site) if _is_cuda_growth(f) else f for f in runtime]
    if cfg.checks:
        runtime += g.run("settings checks", "no settings findings", _settings_findings, facts, res) or []
        runtime += filter_findings(res.cpu_growth, cfg.select, cfg.ignore)
    for code, err in res.rule_failures:  # one warning per rule (a rule failing on two traces warns once)
        g.fail(f"rule {code}", "its findings are missing and the report says the analysis is incomplete", err)
    analysed = res.analysed
    if analysed is not None:
        report.traces = list(analysed.traces)
        report.notes = list(analysed.notes)
        report.findings = _merge(runtime, analysed.findings)
        report.failed_rules = list(analysed.failed_rules)
        report.sections += list(analysed.sections)
    else:
        report.findings = runtime
    report.findings = sort_findings(report.findings)
    section = CaptureSection(**facts.section.__dict__)  # a copy: each report has its own failures
    report.sections.append(section)
    report.notes = list(facts.notes) + report.notes
    section.failures = g.all_failed()
    return report


def publish(prof: "Profiler", facts: RunFacts, report: Report, g: Any, *, final: bool) -> None:
    """Write the report (TensorBoard text, report.json, report.md) and print the summary.

    What is written and printed comes from ``report`` and ``facts`` only; the
    profiler is used for its sinks: the TensorBoard writer (and, at the end,
    its remaining scalars), the results kept for :func:`make_result`, the
    printed-findings memo and the output stream.

    ``final=False`` is the report written when the recorded window closes, on
    the background thread: TensorBoard gets the findings text only (the
    scalars belong to the training thread). ``final=True`` is the end of the
    run: it also writes the remaining scalars and closes the writer, and when
    the window's summary was printed already, prints one line instead of the
    whole summary again unless the findings changed since.
    """
    cfg = facts.config
    section = next(s for s in report.sections if getattr(s, "kind", None) == "capture")
    if prof.writer is not None:
        if final:
            g.run("TensorBoard writer", "TensorBoard holds no findings", _write_tensorboard, prof, report)
        else:
            g.run("TensorBoard writer", "TensorBoard holds no findings", _write_tensorboard_text, prof, report)
    if facts.report_json is not None:
        g.run("report writer", "no report.json/report.md", _write_reports, facts, report)
    if facts.report_json is not None and facts.distributed:
        from gpuprof.capture.gather import gather_cross_rank

        run_dir = Path(facts.section.run_dir)
        # at the window's end too (this is then the background thread: rank 0's bounded wait holds no step)
        g.run("cross-rank report", "no cross_rank.json for this run", gather_cross_rank, report, run_dir,
              run_dir.name, window=None if final else section.steps)
    section.failures = g.all_failed()
    doc = g.run("capture result", "the capture result holds no report", _report_document, report)
    if doc is not None:
        prof._published.append(WindowReport(at_step=section.steps, final=final, report=doc))
    if cfg.print_report:
        early = prof._printed_findings
        now = _findings_key(report)
        if final and early is not None and early[1] == now:
            text = final_line(report, facts, early[0])
        else:
            text = short_report(report, facts)
        prof._printed_findings = (section.steps, now)
        print(text, file=prof.stream, flush=True)


def _report_document(report: Report) -> dict[str, Any]:
    """The report as report.json holds it (JSON-safe: no NaN), for the capture result."""
    import msgspec

    from gpuprof.render.jsonout import render_json

    doc = msgspec.json.decode(render_json(report))
    assert isinstance(doc, dict)
    return doc


def _findings_key(report: Report) -> list[tuple[str, str, str]]:
    return [(f.code, f.message, f.advice) for f in report.findings] + [("", "", r) for r in report.failed_rules]


def final_line(report: Report, facts: RunFacts, at_step: int) -> str:
    """The end-of-run line when the findings are those printed at the window's end."""
    head = short_report(report, facts).split("\n", 1)[0]
    where = f" in {visible(facts.out_dir)}" if facts.out_dir is not None else ""
    return (f"{head}; findings as printed at step {at_step}; report.json and report.md rewritten with the whole "
            f"run{where}")


def _analyze_one(trace: Any, metrics: Any, cfg: Any, merged: Report, failures: list[Any]) -> None:
    from gpuprof.analysis import analyze_trace

    # with a failures list a rule that raises costs neither the other rules' findings
    # nor the training: assemble() warns about it and the report says it is incomplete
    failed: list[Any] = []
    ranks: list[Any] = []
    summary, findings = analyze_trace(trace, cfg.rule_options, tuple(cfg.select), tuple(cfg.ignore), failed,
                                      metrics=metrics, rank_summaries=ranks)
    failures.extend(failed)
    merged.traces.append(summary)
    merged.findings += filter_findings(findings, cfg.select, cfg.ignore)
    merged.failed_rules += [c for c, _ in failed if c not in merged.failed_rules]
    # the rank's summary, for a later cross-rank merge (gpuprof.capture.gather, gpuprof analyze report.json)
    job = [r for r in ranks if r.rank is not None and (r.world_size is None or r.world_size > 1)]
    if job:
        from gpuprof.distributed.reports import RankSummaries

        merged.sections.append(RankSummaries(job))


def _merge(runtime: list[Finding], trace: list[Finding]) -> list[Finding]:
    from gpuprof.codes import apply_overlaps

    return apply_overlaps(list(runtime) + list(trace))


def _settings_findings(facts: RunFacts, res: TraceResults) -> list[Finding]:
    from gpuprof.capture.settings import cudnn_benchmark_finding, tf32_finding

    s = facts.settings
    if s is None or not s.cuda:
        return []
    op = res.op_facts if res.op_facts is not None else {"has_conv": False, "fp32_matmuls": 0}
    has_conv = bool(op["has_conv"] or facts.roots_have_conv)
    out = [cudnn_benchmark_finding(s, has_conv, facts.shapes_stable), tf32_finding(s, op["fp32_matmuls"])]
    return filter_findings([f for f in out if f is not None], facts.config.select, facts.config.ignore)


def _cpu_growth(facts: RunFacts, trace: Any, metrics: Any, g: Any) -> list[Finding]:
    from gpuprof.capture.memory import growth_finding, leak_site, trace_allocated_series, with_leak_site

    series = [v for _, v in trace_allocated_series(trace, 0, metrics)]
    f = growth_finding(series, "cpu_trace", facts.config.options, facts.location)
    if f is None:
        return []
    # the growth is real: find the line that allocates what stays (a second, narrow read of the addresses)
    site = g.run("leak site", "the memory-growth finding points at the capture", leak_site, trace, 0)
    return [with_leak_site(f, site) if site is not None else f]


def _roots_have_conv(prof: "Profiler") -> bool:
    from torch.nn.modules.conv import _ConvNd

    return any(isinstance(m, _ConvNd) for root in prof.placement.roots() for m in root.modules())


def _shapes_stable(prof: "Profiler") -> bool | None:
    """True when the first batches (of a DataLoader, or the step's arguments) all had one shape.

    A different last batch (``drop_last=False``) does not count against it.
    """
    series = [r.signatures for r in prof.loaders.records.values() if r.signatures]
    if prof.step_signatures:
        series.append(prof.step_signatures)
    if not series:
        return None
    for sigs in series:
        head = sigs[:-1] if len(sigs) > 2 else sigs
        if any(s != head[0] for s in head):
            return False
    return True


def _section(prof: "Profiler", trace_paths: list[str]) -> CaptureSection:
    p = prof.paths
    steps = len(prof.step_s)
    total = sum(prof.step_s)
    mem = prof.memory
    series = mem.series() if mem is not None else []
    return CaptureSection(
        logdir=str(p.logdir) if p else prof.config.logdir,
        run_dir=str(p.run_dir) if p else "",
        out_dir=str(p.out_dir) if p else "",
        worker=p.worker if p else "",
        rank=prof.ranks.rank,
        steps=steps,
        step_time_median_ms=statistics.median(prof.step_s) * 1000 if steps else None,
        data_loading_share=data_loading_share(sum(prof.fetch_s), total) if prof.loaders.seen else None,
        recorded_steps=[[t.first_step, t.last_step] for t in prof.traces],
        traces=trace_paths,
        memory_snapshots=[str(s) for s in (prof.history.snapshots if prof.history else [])],
        oom_files=[str(x) for pair in (prof.oom.dumped if prof.oom else []) for x in pair],
        tensorboard_dir=str(p.logdir) if (p and prof.writer is not None) else None,
        memory_series=mem.kind if mem is not None else None,
        memory_first_mib=series[0] / 2**20 if series else None,
        memory_last_mib=series[-1] / 2**20 if series else None,
    )


def _no_trace_note(prof: "Profiler") -> str:
    from gpuprof.capture.config import Schedule

    sched = prof.config.schedule
    where = f" ({sched.describe()})" if isinstance(sched, Schedule) else ""
    return (f"the loop ended after {len(prof.step_s)} steps, before the schedule recorded a step{where}: "
            "no trace was written; pass a shorter schedule, e.g. gpuprof.capture.Schedule(wait=1, warmup=1, "
            "active=3)")


def _gpu_utilization_per_step(m: Any) -> dict[int, float]:
    """Global step -> GPU busy / step time, from one trace's metrics (recorded steps with GPU activity only)."""
    out: dict[int, float] = {}
    dev = m.main_device
    if dev is None or not m.has_step_markers:
        return out
    busy = m.busy_per_step.get(dev, [])
    for st, b in zip(m.steps, busy):
        if st.dur > 0:
            out[st.id] = min(b / st.dur, 1.0)
    return out


def _write_tensorboard(prof: "Profiler", report: Report) -> None:
    """End of the run (driving thread): the remaining scalars, GPU utilisation, the findings, close."""
    w = prof.writer
    prof._flush_scalars(wait=True)
    res = prof._trace_results
    util = res.gpu_util if res is not None and res.gpu_util is not None else {}
    for step, u in sorted(util.items()):
        w.add_step(step, {"gpu_utilization": u})
    _write_tensorboard_text(prof, report)
    w.close()


def _write_tensorboard_text(prof: "Profiler", report: Report) -> None:
    """The findings in the Text tab, at the report's step (the writer locks its file: any thread)."""
    sec = next(s for s in report.sections if getattr(s, "kind", None) == "capture")
    prof.writer.add_text(findings_markdown(report), step=sec.steps)


def _write_reports(facts: RunFacts, report: Report) -> None:
    from gpuprof.render.jsonout import render_json

    assert facts.report_json is not None and facts.report_md is not None
    _write_text(Path(facts.report_json), render_json(report))
    try:
        from gpuprof.render import render

        md = render(report, "markdown")
    except ModuleNotFoundError:  # the markdown renderer ships separately; use the compact one
        md = "# gpuprof capture report\n\n" + findings_markdown(report)
    _write_text(Path(facts.report_md), md)


def _write_text(path: Path, text: str) -> None:
    atomic_write(path, text)


# ---------------------------------------------------------------------- text


def _cost(f: Finding) -> str:
    if f.cost_us_per_step is None:
        return ""
    share = f" ({f.cost_share:.0%})" if f.cost_share is not None else ""
    return f"{f.cost_us_per_step / 1000:.2f} ms/step{share}"


def _cost_suffix(f: Finding) -> str:
    """`` cost 12.30 ms/step (18%)`` after a finding's message, or less: a message that already
    states the figure (GP601's "... (1992.80 ms/step)") is not followed by it again."""
    cost = _cost(f)
    if not cost:
        return ""
    figure, _, share = cost.partition(" (")
    if figure not in f.message:
        return f" cost {cost}"
    share = share.rstrip(")")
    return f" ({share} of step)" if share and share not in f.message else ""


def findings_markdown(report: Report) -> str:
    """The findings and the run facts for TensorBoard's Text tab (:mod:`gpuprof.render.tbtext`)."""
    from gpuprof.render.tbtext import findings_text

    return findings_text(report)


def short_report(report: Report, facts: RunFacts) -> str:
    """The summary printed when the report is written: every finding, each with its fix.

    Reads ``report`` and, from ``facts``, the step count (a report without a
    capture section) and where report.md is.
    """
    sec = next((s for s in report.sections if getattr(s, "kind", None) == "capture"), None)
    lines = []
    head = f"gpuprof: {sec.steps if sec is not None else facts.steps} steps"
    if sec and sec.step_time_median_ms is not None:
        head += f", median {sec.step_time_median_ms:.2f} ms/step"
    utils = [t.gpu_utilization for t in report.traces if t.gpu_utilization is not None]
    if utils:
        head += f", GPU busy {sum(utils) / len(utils):.0%} of recorded steps"
    if sec and sec.data_loading_share is not None:
        head += f", data loading {sec.data_loading_share:.0%}"
    lines.append(head)
    findings = sort_findings(report.findings)
    if findings:
        counts = {s: sum(1 for f in findings if f.severity == s) for s in Severity}
        parts = [f"{n} {s.value}{'s' if n != 1 else ''}" for s, n in sorted(counts.items(),
                 key=lambda kv: -kv[0].rank) if n]
        lines.append(f"gpuprof: {len(findings)} finding{'s' if len(findings) != 1 else ''} ({', '.join(parts)})")
        for f in findings:  # all of them, whole: the summary is the report most users read
            where = f" [{_short_loc(f)}]" if f.location else ""
            cost = _cost_suffix(f)
            lines.append(f"  {f.severity.value:<7} {visible(f.code)} {one_line(f.message)}{cost}{where}")
            if f.advice:
                lines.append(f"          Fix: {one_line(f.advice)}")
    elif not report.failed_rules:
        lines.append("gpuprof: no findings")
    if report.failed_rules:
        lines.append(f"gpuprof: {'' if findings else 'no findings, but '}{_incomplete(report)}")
    for n in report.notes:
        lines.append(f"gpuprof: note: {one_line(n)}")
    if facts.report_md is not None and sec is not None:
        lines.append(f"gpuprof: files in {visible(sec.run_dir)}")
        for t in sec.traces:
            lines.append(f"  trace        {visible(t)}")
        if sec.traces:
            lines.append("               open in Perfetto (https://ui.perfetto.dev, Open trace file) or "
                         f"run: gpuprof analyze {visible(shlex.quote(sec.run_dir))}")
        for s in sec.memory_snapshots[:2]:
            lines.append(f"  memory       {visible(s)}  (gpuprof memory {visible(shlex.quote(s))})")
        if sec.tensorboard_dir:
            lines.append(f"  TensorBoard  tensorboard --logdir {visible(shlex.quote(sec.tensorboard_dir))}")
        if os.path.exists(facts.report_md):
            lines.append(f"  report       {visible(facts.report_md)} (and report.json)")
    return "\n".join(lines)


def _incomplete(report: Report) -> str:
    """The line that keeps a report with failed rules from reading as complete."""
    rules = ("rule " if len(report.failed_rules) == 1 else "rules ") + ", ".join(report.failed_rules)
    return f"the analysis is incomplete: {rules} failed (a gpuprof bug; see the notes)"


def _short_loc(f: Finding) -> str:
    loc = f.location
    assert loc is not None
    name = visible(os.path.basename(loc.file))
    return f"{name}:{loc.line}" if loc.line is not None else name
