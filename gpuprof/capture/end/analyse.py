"""Analyse the traces and merge them with the runtime findings into one report.

Runs when the schedule's last recorded window closes, on a background thread,
and again at the end of the run, reusing the trace results. It reads the
trace files and the frozen :class:`~gpuprof.capture.run.RunFacts` only
(never torch, never the profiler). Each part is guarded: a failure is a
warning (from the background thread, replayed on the training thread) and
the remaining parts still run. The analyzer is the one behind
``gpuprof analyze``; its findings are merged with the runtime ones (GP6xx),
and where two codes report one problem the registry's overlap policy folds
one into the other: the one finding flow, :func:`gpuprof.flow.finish` (docs/codes.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuprof.capture.guard import Guard
from gpuprof.capture.run import CaptureSection, RunFacts
from gpuprof.findings import Finding
from gpuprof.flow import finish as finish_findings
from gpuprof.report import Report
from gpuprof.runner import Selection

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.config import CaptureConfig
    from gpuprof.capture.job.phases import WatchData
    from gpuprof.capture.memory import LeakSite
    from gpuprof.runner import RuleFailure
    from gpuprof.trace.metrics import TraceMetrics
    from gpuprof.trace.model import Trace

__all__ = ["TraceResults", "assemble", "loading_basis_notes", "own_schedule_advice", "preload", "trace_results",
           "within_run_spread"]

# a breakdown share and GP601's share this far apart (absolute) get a note saying they cover different steps
LOADING_BASIS_GAP = 0.05


@dataclass
class TraceResults:
    """What the traces say; computed once per set of traces (reads files only, no torch)."""

    trace_paths: list[str]
    analysed: Report | None = None
    rule_failures: list[RuleFailure] = field(default_factory=list)  # each rule that raised
    op_facts: dict[str, int | bool] | None = None  # has_conv, fp32_matmuls, launches, launch_ns (GP620/621/623)
    cpu_growth: list[Finding] = field(default_factory=list)
    gpu_util: dict[int, float] | None = None
    leak_site: LeakSite | None = None  # the CUDA memory growth's (GP640) function, from the traces
    cpu_leak_site: LeakSite | None = None  # the CPU growth's (cpu_growth) function, from the traces


def preload() -> None:
    """Import what the report thread needs, on the driving thread (at the capture's start).

    Importing on the report thread would stall the window's end, or leave a
    half-done import to DataLoader workers forked meanwhile.
    """
    import gpuprof.analysis  # noqa: F401
    import gpuprof.capture.end.gather  # noqa: F401 - the window's cross-rank gather under torchrun
    import gpuprof.capture.memory  # noqa: F401
    import gpuprof.capture.settings  # noqa: F401
    import gpuprof.distributed.analysis  # noqa: F401
    import gpuprof.render  # noqa: F401 - the markdown report
    import gpuprof.render.jsonout  # noqa: F401
    import gpuprof.trace.load  # noqa: F401
    import gpuprof.trace.metrics  # noqa: F401


def trace_results(facts: RunFacts, g: Guard) -> TraceResults:
    """Analyse the traces: the analyzer's rules, the settings facts, memory growth, GPU utilisation.

    Each trace is loaded once and its metrics computed once; every consumer
    (the rules, the settings facts, the CPU memory series, the leak site,
    the GPU utilisation scalars) reads that one :class:`~gpuprof.trace.model.Trace`.
    """
    cfg = facts.config
    res = TraceResults(trace_paths=list(facts.trace_paths))
    wants_util = facts.tensorboard and bool(facts.traces)
    cpu_growth = cfg.checks and not facts.cuda and cfg.profile_memory
    cuda_leak = any(_is_cuda_growth(f) for f in facts.runtime)
    if cfg.analyze and facts.traces:
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
                prev = res.op_facts
                res.op_facts = op if prev is None else {
                    k: (bool(prev[k] or v) if k == "has_conv" else int(prev[k]) + int(v)) for k, v in op.items()}
        if cpu_growth and not res.cpu_growth:
            growth = g.run("memory growth check", "no memory-growth finding", _cpu_growth, facts, trace, metrics, g)
            res.cpu_growth, res.cpu_leak_site = growth if growth is not None else ([], None)
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


def _is_host_growth(f: Finding) -> bool:
    return f.code == "GP640" and bool(f.evidence) and f.evidence[0].extra.get("series") == "host_rss"


def _load(path: Path) -> tuple[Trace, TraceMetrics]:
    from gpuprof.trace.load import load_trace
    from gpuprof.trace.metrics import compute_metrics

    trace = load_trace(path)
    return trace, compute_metrics(trace)


def assemble(facts: RunFacts, res: TraceResults, g: Guard, *, memory: bool = False) -> Report:
    """The merged report from the frozen facts and the trace results (any thread). ``memory``: add the memory
    sections of the run's snapshots (the end-of-run report only: a window report's thread shares the GIL with
    the training, and a snapshot's analysis takes seconds)."""
    cfg = facts.config
    report = Report(command="capture", inputs=list(facts.trace_paths))
    runtime = list(facts.runtime)
    from gpuprof.capture.memory import at_statement, with_leak_site

    if res.leak_site is not None:  # the CUDA growth measured per step, pointed at its line by the traces
        site = at_statement(res.leak_site, facts.statements, "cuda")  # the statement, once the run has ended
        runtime = [with_leak_site(f, site) if _is_cuda_growth(f) else f for f in runtime]
    if cfg.checks:
        runtime += g.run("settings checks", "no settings findings", _settings_findings, facts, res) or []
        cpu_site = res.cpu_leak_site
        host = [f for f in runtime if _is_host_growth(f)]
        if host and res.cpu_growth:  # one finding for the host's growth: the whole job's, with the traces' site
            if cpu_site is not None and host[0].location == facts.location:  # the census named no line
                site = at_statement(cpu_site, facts.statements, "cpu")
                runtime = [with_leak_site(f, site) if f is host[0] else f for f in runtime]
        else:
            runtime += [with_leak_site(f, at_statement(cpu_site, facts.statements, "cpu")) if cpu_site is not None
                        else f for f in res.cpu_growth]
    for code, err in res.rule_failures:  # one warning per rule (a rule failing on two traces warns once)
        g.fail(f"rule {code}", "its findings are missing and the report says the analysis is incomplete", err)
    analysed = res.analysed
    if analysed is not None:
        report.traces = list(analysed.traces)
        report.notes = list(analysed.notes)
        report.findings = runtime + analysed.findings
        report.failed_rules = list(analysed.failed_rules)
        report.sections += list(analysed.sections)
    else:
        report.findings = runtime
    if facts.traces:  # the recorded windows, and what changed in each anomaly window (gpuprof.capture.job.verdict)
        g.run("window verdict", "no verdict on the anomaly windows", _job_windows, facts, report)
    # the memory by category / stage / module of the run's snapshots (CUDA): the last window's and the OOM dump's
    snaps = [str(t.snapshot) for t in facts.traces if t.snapshot is not None]
    if memory and (snaps or facts.files):
        from gpuprof.capture.oom import memory_sections

        mem = g.run("memory analysis", "no memory section in the report", memory_sections, snaps, facts.files)
        if mem is not None:
            report.sections += mem[0]
            report.findings += mem[1]
    # the one boundary (gpuprof.flow): select=/ignore=, the overlap policy (GP102 under GP601), links, order
    report.findings = finish_findings(report.findings, Selection.of(cfg.select, cfg.ignore))
    report.notes += loading_basis_notes(report)
    report.findings = own_schedule_advice(report.findings, cfg.schedule)
    report.findings, spread_notes = within_run_spread(report.findings, facts.watch)
    report.notes += spread_notes
    section = CaptureSection(**facts.section.__dict__)  # a copy: each report has its own failures
    report.sections.append(section)
    report.notes = list(facts.notes) + report.notes
    if facts.watch is not None:
        from gpuprof.capture.job.phases import job_summary

        report.job = g.run("job timeline", "no job timeline in the report", job_summary, facts.watch)
    if facts.traces:  # the recorded windows (gpuprof.capture.job.verdict), with the watch on or off
        g.run("window verdict", "no job.windows in report.json", _attach_windows, facts, report)
    section.failures = g.all_failed()
    return report


def _job_windows(facts: RunFacts, report: Report) -> None:
    from gpuprof.capture.job.verdict import job_windows, trigger_notes, window_verdicts

    wins = job_windows(facts.traces)
    if len(wins) > 1:  # every view shows the notes: say which windows the traces are
        report.notes.append("recorded windows: " + ", ".join(
            f"steps {w.start_step}-{w.start_step + w.steps - 1} ({w.reason})" for w in wins))
    report.findings += window_verdicts(facts.traces, report, facts.location)
    report.notes += trigger_notes(facts.traces, report)


def _attach_windows(facts: RunFacts, report: Report) -> None:
    from gpuprof.capture.job.verdict import job_windows

    if report.job is not None:  # the watch off (or failed): no job, so no job.windows (the notes name them)
        report.job.windows = job_windows(facts.traces)


def _analyze_one(trace: Trace, metrics: TraceMetrics, cfg: CaptureConfig, merged: Report,
                 failures: list[RuleFailure]) -> None:
    from gpuprof.analysis import analyze_trace
    from gpuprof.distributed.summary import RankSummary

    # with a failures list a rule that raises costs neither the other rules' findings
    # nor the training: assemble() warns about it and the report says it is incomplete
    failed: list[RuleFailure] = []
    ranks: list[RankSummary] = []
    summary, findings = analyze_trace(trace, cfg.rule_options, tuple(cfg.select), tuple(cfg.ignore), failed,
                                      metrics=metrics, rank_summaries=ranks)
    failures.extend(failed)
    merged.traces.append(summary)
    merged.findings += findings
    merged.failed_rules += [c for c, _ in failed if c not in merged.failed_rules]
    # the rank's summary, for a later cross-rank merge (gpuprof.capture.end.gather, gpuprof analyze report.json)
    job = [r for r in ranks if r.rank is not None and (r.world_size is None or r.world_size > 1)]
    if job:
        from gpuprof.distributed.reports import RankSummaries

        merged.sections.append(RankSummaries(job))


def _settings_findings(facts: RunFacts, res: TraceResults) -> list[Finding]:
    from gpuprof.capture.settings import (
        cudnn_benchmark_finding,
        deterministic_finding,
        launch_blocking_finding,
        tf32_finding,
    )

    s = facts.settings
    if s is None:
        return []
    op = res.op_facts if res.op_facts is not None else {"has_conv": False, "fp32_matmuls": 0}
    out: list[Finding | None] = []
    if s.cuda:
        has_conv = bool(op["has_conv"] or facts.roots_have_conv)
        out += [cudnn_benchmark_finding(s, has_conv, facts.shapes_stable), tf32_finding(s, int(op["fp32_matmuls"]))]
    # GP623's measured wait: the launch calls of the recorded steps (traces of a CUDA run only)
    steps = sum(t.last_step - t.first_step + 1 for t in facts.traces)
    launch_ns = op.get("launch_ns")
    median_ms = facts.section.step_time_median_ms
    out.append(launch_blocking_finding(s, int(launch_ns) / 1000 if launch_ns is not None else None,
                                       int(op.get("launches", 0)), steps,
                                       median_ms * 1000 if median_ms else None))
    out.append(deterministic_finding(s))
    return [f for f in out if f is not None]


def _cpu_growth(facts: RunFacts, trace: Trace, metrics: TraceMetrics,
                g: Guard) -> tuple[list[Finding], LeakSite | None]:
    from gpuprof.capture.memory import growth_finding, leak_site, trace_allocated_series

    series = [v for _, v in trace_allocated_series(trace, 0, metrics)]
    f = growth_finding(series, "cpu_trace", facts.config.options, facts.location)
    if f is None:
        return [], None
    # the growth is real: find the function that allocates what stays (a second, narrow read of the addresses)
    return [f], g.run("leak site", "the memory-growth finding points at the capture", leak_site, trace, 0)


def _gpu_utilization_per_step(m: TraceMetrics) -> dict[int, float]:
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


def loading_basis_notes(report: Report) -> list[str]:
    """Why the step breakdown's data-loading share and GP601's differ, when they do: they measure different steps.

    The breakdown is the trace's: only the recorded window's steps (after the schedule's warm-up). GP601 is the
    loader monitor's: every step of the run, its first batches (worker start-up, cold caches) included. A new
    user saw "data loading 12%" above "GP601: 35% of step time" with nothing saying why.
    """
    gp601 = [f for f in report.findings if f.code == "GP601" and f.evidence]
    if not gp601 or not report.traces:
        return []
    run_share = gp601[0].evidence[0].value
    run_steps = gp601[0].evidence[0].extra.get("steps")
    if not isinstance(run_share, (int, float)):
        return []
    rec_us = sum(t.breakdown_us.get("data_loading", 0.0) * t.num_steps for t in report.traces)
    step_us = sum(t.step_time_mean_us * t.num_steps for t in report.traces)
    n_rec = sum(t.num_steps for t in report.traces)
    if step_us <= 0 or abs(rec_us / step_us - run_share) < LOADING_BASIS_GAP:
        return []
    steps = f"all {run_steps} steps of the run" if isinstance(run_steps, int) else "every step of the run"
    return [f"data loading: the step breakdown's {rec_us / step_us:.0%} covers the {n_rec} recorded "
            f"step{'s' if n_rec != 1 else ''} only (the trace); GP601's {run_share:.0%} covers {steps}, "
            "measured by the DataLoader monitor (warm-up and the first batches of each epoch included)"]


def own_schedule_advice(findings: list[Finding], schedule: object) -> list[Finding]:
    """GP901's warm-up advice, re-aimed at gpuprof's own schedule when the capture chose the recorded steps.

    The rule reads any trace and tells its author to lengthen ``torch.profiler.schedule``'s warm-up; in a capture
    with gpuprof's :class:`~gpuprof.capture.config.Schedule` the user wrote no profiler schedule, so the fix is
    gpuprof's ``schedule=`` (a later window). A user's own ``torch.profiler.schedule`` callable keeps the advice.
    """
    from dataclasses import replace

    from gpuprof.capture.config import Schedule

    if not isinstance(schedule, Schedule):
        return findings
    out = []
    for f in findings:
        ev = f.evidence[0] if f.code == "GP901" and f.evidence else None
        if ev is None or ev.metric != "warmup_step_ratio":
            out.append(f)
            continue
        n_warm = len(ev.extra.get("step_ids") or ()) or 1
        later = Schedule(wait=schedule.wait + n_warm + 2, warmup=schedule.warmup, active=schedule.active,
                         repeat=schedule.repeat, skip_first=schedule.skip_first)
        out.append(replace(f, advice=(
            f"These steps are gpuprof's recording window ({schedule.describe()}, its default schedule unless you "
            "passed one): the job was still warming up when it began. Record later with "
            f"gpuprof.profile(..., schedule=gpuprof.capture.Schedule(wait={later.wait}, warmup={later.warmup}, "
            f"active={later.active})) ({later.describe()}); this report's figures are skewed by those steps.")))
    return out


def within_run_spread(findings: list[Finding], watch: WatchData | None) -> tuple[list[Finding], list[str]]:
    """GP901 (slow or warm-up steps inside a recorded window) judged against the whole job's own spread.

    The rule sees the window's few steps only; the watch saw every step. A window's slow steps whose ratio to
    the window's median stays within the job's spread (``SPREAD_MARGIN`` x the ``SPREAD_QUANTILE`` of the job's
    steps, gpuprof's own and the recorded ones left out, over their median: the anomaly detector's rule) are
    the machine's noise every step of the run shows, not outliers: the finding is dropped, with a note. Ratios
    are compared, not times, as the recorded steps carry the profiler's cost.
    """
    from gpuprof.capture.job.windows import SPREAD_MARGIN, SPREAD_QUANTILE

    if watch is None or not any(f.code == "GP901" for f in findings):
        return findings, []
    aside = set(watch.recorded_steps) | set(watch.own_steps) | set(watch.eval_steps)
    times = [float(t) for i, t in enumerate(watch.step_s) if i not in aside and t > 0]
    if len(times) < 20:  # too few steps to know the job's spread
        return findings, []
    times.sort()
    median = times[len(times) // 2]
    spread = SPREAD_MARGIN * times[min(len(times) - 1, int(SPREAD_QUANTILE * len(times)))] / median
    out, notes = [], []
    for f in findings:
        ev = f.evidence[0] if f.code == "GP901" and f.evidence else None
        ratio = ev.value if ev is not None and ev.metric in ("slow_step_ratio", "warmup_step_ratio") else None
        if isinstance(ratio, (int, float)) and ratio <= spread:
            notes.append(f"GP901 left out: the recorded window's slowest step ({ratio:g}x its median) is within the "
                         f"whole job's own spread ({spread:.2f}x the median step over {len(times)} steps)")
            continue
        out.append(f)
    return out, notes
