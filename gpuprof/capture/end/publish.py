"""Write a report (report.json/report.md, TensorBoard, the cross-rank report) and print its summary.

:func:`window_report` runs on the background thread when the schedule's last
recorded window closes; :func:`final_report` on the driving thread when the
capture stops (reusing the window's trace results); :func:`make_result` then
builds the plain :class:`~gpuprof.capture.result.CaptureResult`. They read
the frozen :class:`~gpuprof.capture.run.RunFacts` and write to the session's
:class:`Outputs`, never to the ``Profiler``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from gpuprof.atomic import atomic_write
from gpuprof.capture.end import worker
from gpuprof.capture.end.analyse import TraceResults, assemble, trace_results
from gpuprof.capture.end.text import capture_section, final_line, findings_markdown, short_report
from gpuprof.capture.guard import Guard
from gpuprof.capture.result import CaptureResult, RecordedTrace, WindowReport
from gpuprof.capture.run import LEAK_STATEMENTS, LeakLines, RunFacts
from gpuprof.capture.scalars import ScalarWriter
from gpuprof.report import Report
from gpuprof.runner import Selection

__all__ = ["Outputs", "final_report", "in_notebook", "make_result", "publish", "window_report"]

FindingsKey = list[tuple[str, str, str]]


def in_notebook() -> bool:
    """The capture runs in a Jupyter kernel (its stderr is the kernel's stream, shown in the cell)."""
    return "ipykernel" in sys.modules and type(sys.stderr).__module__.startswith("ipykernel")


@dataclass
class Outputs:
    """Where a capture's reports go, and what the end of the run keeps from the window's report.

    Owned by the session; written by the window report's thread and then by
    the final report (never both at once: the final report waits for the thread).
    """

    scalars: ScalarWriter | None = None  # the run's TensorBoard event file
    stream: TextIO = field(default_factory=lambda: sys.stderr)  # where the summary is printed
    print_once: bool = False  # print the summary at the end only (a notebook: no printing from a thread)
    published: list[WindowReport] = field(default_factory=list)  # each report written (window, then final)
    printed: tuple[int, FindingsKey] | None = None  # (step, findings) of the summary printed last
    trace_results: TraceResults | None = None  # the window's, reused at the end when the traces are the same
    _lock: threading.Lock = field(default_factory=threading.Lock)


def window_report(facts: RunFacts, out: Outputs, g: Guard) -> Report:
    """The report written when the recorded window closes, while the run goes on (the report's thread).

    Big traces are analysed in a child process (:mod:`gpuprof.capture.end.worker`), small ones (or when
    the child fails) here.
    """
    res = (worker.analyse_in_child(facts, g) if worker.wanted(facts) else None) or trace_results(facts, g)
    out.trace_results = res
    report = assemble(facts, res, g)
    report.notes.append(f"written when the recorded window closed at step {facts.steps}, while the run "
                        "goes on; rewritten with the whole run when it ends")
    publish(facts, out, report, g, final=False)
    return report


def final_report(facts: RunFacts, out: Outputs, g: Guard, leak_lines: LeakLines | None = None) -> Report:
    """The end-of-run report, on the driving thread (traces analysed at the window's end are reused).

    ``leak_lines``: the last window's walk for GP640's statement, made here only when the traces show a host
    memory growth and :func:`~gpuprof.capture.facts.run_facts` could not know it (no window report analysed
    these traces: under ``gpuprof run`` the window's report waits for the end), so a job whose memory does not
    grow never pays for it (0.4 s of CPU measured on a Python-heavy loop's window)."""
    res = out.trace_results
    if res is None or res.trace_paths != facts.trace_paths:
        res = out.trace_results = trace_results(facts, g)
    if leak_lines is not None and not facts.statements:
        found = g.run(LEAK_STATEMENTS, "a memory-growth finding names the function's first line", leak_lines,
                      bool(res.cpu_growth))
        if found:
            facts = dataclasses.replace(facts, statements=found)
    report = assemble(facts, res, g, memory=True)
    publish(facts, out, report, g, final=True)
    return report


def publish(facts: RunFacts, out: Outputs, report: Report, g: Guard, *, final: bool) -> None:
    """Write the report (TensorBoard text, report.json, report.md) and print the summary.

    ``final=False`` is the report written when the recorded window closes, on
    the background thread: TensorBoard gets the findings text only (the
    scalars belong to the training thread). ``final=True`` is the end of the
    run: it also writes the remaining scalars and closes the writer, and when
    the window's summary was printed already, prints one line instead of the
    whole summary again unless the findings changed since.
    """
    section = capture_section(report)
    assert section is not None  # assemble() adds it
    if out.scalars is not None:
        if final:
            g.run("TensorBoard writer", "TensorBoard holds no findings", _write_tensorboard, out, report, g)
        else:
            g.run("TensorBoard writer", "TensorBoard holds no findings", _write_tensorboard_text, out.scalars,
                  report)
    if facts.report_json is not None:
        g.run("report writer", "no report.json/report.md", _write_reports, facts, report)
    # a window after the default one is each rank's own (an anomaly, or a trigger seen at different steps):
    # no cross-rank gather for it (the ranks' keys would not meet); the end of the run gathers everything
    later_window = not final and bool(facts.traces) and facts.traces[-1].window is not None
    if facts.report_json is not None and facts.distributed and facts.run_dir is not None and not later_window:
        from gpuprof.capture.end.gather import gather_cross_rank

        run_dir = Path(facts.run_dir)
        # at the window's end too (this is then the background thread: rank 0's bounded wait holds no step)
        g.run("cross-rank report", "no cross_rank.json for this run", gather_cross_rank, report, run_dir,
              run_dir.name, window=None if final else section.steps,
              selection=Selection.of(facts.config.select, facts.config.ignore), options=facts.config.rule_options)
    section.failures = g.all_failed()
    doc = g.run("capture result", "the capture result holds no report", _report_document, report)
    if doc is not None:
        with out._lock:
            out.published.append(WindowReport(at_step=section.steps, final=final, report=doc))
    if facts.config.print_report and (final or not out.print_once):
        early = out.printed
        now = _findings_key(report)
        if final and early is not None and early[1] == now:
            text = final_line(report, facts, facts.out_dir, early[0])
        else:
            text = short_report(report, facts, _width_of(out.stream))
        out.printed = (section.steps, now)
        print(text, file=out.stream, flush=True)
    if final and facts.config.to:
        from gpuprof.capture.end.trackers import send_to_trackers

        g.run("experiment trackers", "the run's results are not in the trackers", send_to_trackers, facts,
              report, doc, g, out.stream)


def _width_of(stream: TextIO) -> int:
    """The columns the summary is wrapped at: the terminal's when ``stream`` is one, else COLUMNS or 120, as the
    terminal report (:func:`gpuprof.render.width.width_for`: the end of a run imports no rich for this)."""
    from gpuprof.render.width import width_for

    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        tty = False
    return width_for(tty)


def make_result(facts: RunFacts, out: Outputs, report: Report | None, warnings: tuple[str, ...],
                inactive: str | None) -> CaptureResult:
    """The plain :class:`~gpuprof.capture.result.CaptureResult` of the capture, from ``report`` (the final
    one, or None when no report could be made) and the window report published before it."""
    sec = capture_section(report) if report is not None else None
    traces = tuple(RecordedTrace(path=str(t.path), first_step=t.first_step, last_step=t.last_step,
                                 memory_snapshot=str(t.snapshot) if t.snapshot is not None else None)
                   for t in facts.traces)
    files = [str(t.path) for t in facts.traces] + list(facts.files)
    if out.scalars is not None:
        files.append(out.scalars.path)
    files += [f for f in (facts.report_json, facts.report_md) if f is not None]
    runtime = tuple(f for f in (report.findings if report is not None else facts.runtime) if f.origin == "runtime")
    return CaptureResult(
        run_dir=facts.run_dir, out_dir=facts.out_dir, worker=facts.worker, rank=facts.rank, steps=facts.steps,
        step_time_median_ms=sec.step_time_median_ms if sec else None,
        data_loading_share=sec.data_loading_share if sec else None,
        traces=traces, files=tuple(dict.fromkeys(f for f in files if os.path.exists(f))),
        reports=tuple(out.published), runtime_findings=runtime, warnings=warnings, inactive=inactive,
    )


def _report_document(report: Report) -> dict[str, object]:
    """The report as report.json holds it (JSON-safe: no NaN), for the capture result."""
    import msgspec

    from gpuprof.render.jsonout import render_json

    doc = msgspec.json.decode(render_json(report))
    assert isinstance(doc, dict)
    return doc


def _findings_key(report: Report) -> FindingsKey:
    return [(f.code, f.message, f.advice) for f in report.findings] + [("", "", r) for r in report.failed_rules]


def _write_tensorboard(out: Outputs, report: Report, g: Guard) -> None:
    """End of the run (driving thread): the remaining scalars, GPU utilisation, the findings, close."""
    w = out.scalars
    assert w is not None
    err = w.join()  # the session queued the last steps before the final report
    if err is not None:
        g.fail("TensorBoard writer", "no further TensorBoard scalars", err)
    res = out.trace_results
    util = res.gpu_util if res is not None and res.gpu_util is not None else {}
    for step, u in sorted(util.items()):
        w.writer.add_step(step, {"gpu_utilization": u})
    _write_tensorboard_text(w, report)
    w.close()


def _write_tensorboard_text(w: ScalarWriter, report: Report) -> None:
    """The findings in the Text tab, at the report's step (the writer locks its file: any thread)."""
    sec = capture_section(report)
    w.writer.add_text(findings_markdown(report), step=sec.steps if sec is not None else 0)


def _write_reports(facts: RunFacts, report: Report) -> None:
    from gpuprof.render.jsonout import render_json

    assert facts.report_json is not None and facts.report_md is not None
    atomic_write(Path(facts.report_json), render_json(report))
    from gpuprof.render import render

    atomic_write(Path(facts.report_md), render(report, "markdown"))
