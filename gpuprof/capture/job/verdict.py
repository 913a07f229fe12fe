"""The job's windows in the report: ``job.windows``, and what changed between the steady and anomaly windows.

Reads the analysed report and the trace files' window facts only (no torch).
Each anomaly window is compared with the steady (default) window through the
``gpuprof diff`` machinery (:func:`gpuprof.diff.compare.diff_reports`, each
side the report cut down to that window's trace and findings), and the
result is one GP650 finding: when the steady state broke, by how much the
step time moved, and which parts of the step the time went to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprof.findings import Evidence, Finding, SourceLocation

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.job.windows import Anomaly
    from gpuprof.capture.run import TraceFile
    from gpuprof.report import JobWindow, Report

__all__ = ["PART_WORDS", "contention_finding", "job_windows", "trigger_notes", "window_verdicts"]

# the diff's breakdown parts, as a verdict names them
PART_WORDS = {
    "data_loading": "data wait", "cpu_exec": "host (CPU) work", "kernel": "GPU kernels",
    "communication": "communication", "memcpy": "copies", "memset": "memsets", "runtime": "CUDA runtime calls",
    "other": "other host time",
}
MIN_PART_SHARE = 0.1  # a part is named when it moved by at least this share of the step-time change
MAX_PARTS = 3

_ADVICE = {
    "data_loading": "The added time is spent waiting for data: the loader slowed down (slower storage or network, "
                    "costlier decoding, a cache that stopped hitting). More DataLoader workers, prefetch_factor or "
                    "a faster source hide it; the anomaly window's trace shows the loader's calls.",
    "cpu_exec": "The added time is host work inside the step: the anomaly window's operators (gpuprof diff of the "
                "two traces) name what got slower.",
    "other": "The added time is host time outside the recorded operators (Python code, sleeps, I/O in the step): "
             "the anomaly window's trace shows where the thread was.",
    "kernel": "GPU kernels got slower: clocks throttled (power, heat), another process shares the GPU, or the "
              "inputs grew; the diff of the two traces names the kernels.",
    "communication": "Collectives take longer: a slower rank, or the network; compare the ranks' windows.",
}


def job_windows(traces: Sequence[TraceFile]) -> list[JobWindow]:
    """``job.windows`` of report.json: ``{start_step, steps, reason}`` per recorded window, in step order."""
    from gpuprof.report import JobWindow

    return [JobWindow(t.first_step, t.last_step - t.first_step + 1, t.reason)
            for t in sorted(traces, key=lambda t: t.first_step)]


def _side(report: Report, tf: TraceFile) -> dict[str, Any]:
    """The report cut down to one window: its trace summary and the findings found in it (JSON form)."""
    name = Path(tf.path).name
    traces = [t.to_dict() for t in report.traces if Path(t.path).name == name]
    findings = [f.to_dict() for f in report.findings if f.source and Path(f.source).name == name]
    from gpuprof.report import SCHEMA_VERSION

    # read back through the typed saved-report reader (gpuprof.saved), as a report.json of this schema would be
    return {"schema_version": SCHEMA_VERSION, "inputs": [str(tf.path)], "traces": traces, "findings": findings}


def _metric(diff: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    return next((m for m in diff["metrics"] if m["name"] == name), {})


def _ms(us: float) -> str:
    return f"{us / 1000:+.3g} ms"


def window_verdicts(traces: Sequence[TraceFile], report: Report,
                    location: SourceLocation | None) -> list[Finding]:
    """One GP650 finding per anomaly window that can be compared with the steady window."""
    steady = next((t for t in sorted(traces, key=lambda t: t.first_step) if t.window is None), None)
    if steady is None:
        return []
    before = _side(report, steady)
    if not before["traces"]:
        return []
    out = []
    for tf in traces:
        if tf.reason != "anomaly":
            continue
        after = _side(report, tf)
        if not after["traces"]:
            continue
        from gpuprof.diff.compare import diff_reports  # imported only when there is a window to compare

        diff = diff_reports(before, after, ("steady window", "anomaly window"))
        out.append(_finding(diff, steady, tf, location))
    return out


def trigger_notes(traces: Sequence[TraceFile], report: Report) -> list[str]:
    """One note per window recorded on demand: what changed against the steady window (the same comparison
    as GP650's, said as a note: nobody claimed this window was anomalous)."""
    steady = next((t for t in sorted(traces, key=lambda t: t.first_step) if t.window is None), None)
    before = _side(report, steady) if steady is not None else None
    out = []
    for tf in traces:
        if tf.reason != "trigger" or steady is None or before is None or not before["traces"]:
            continue
        after = _side(report, tf)
        if after["traces"]:
            from gpuprof.diff.compare import diff_reports

            change, parts, _ = _changes(diff_reports(before, after, ("steady window", "trigger window")))
            what = ", ".join(f"{PART_WORDS[k]} {_ms(c)}" for k, c in parts) or "no part of the step moved by much"
            out.append(f"the window recorded on demand (steps {tf.first_step}-{tf.last_step}) against the steady "
                       f"window (steps {steady.first_step}-{steady.last_step}): step time {_ms(change)}: {what}")
    return out


def _changes(diff: Mapping[str, Any]) -> tuple[float, list[tuple[str, float]], list[Mapping[str, Any]]]:
    """(step-time change, the parts that moved most, the operators that moved most), in µs per step."""
    change = float(_metric(diff, "step_time").get("change_us") or 0.0)
    floor = max(MIN_PART_SHARE * abs(change), 1.0)  # a part or operator named moved by at least this (us)
    parts = []
    for key in PART_WORDS:
        c = _metric(diff, "breakdown." + key).get("change_us")
        if isinstance(c, (int, float)) and abs(c) >= floor:
            parts.append((key, float(c)))
    parts.sort(key=lambda kv: -abs(kv[1]))
    ops = sorted((r for r in diff["operators"]["slower"] + diff["operators"]["added"] if r["change_us"] >= floor),
                 key=lambda r: -r["change_us"])[:2]
    return change, parts[:MAX_PARTS], ops


def _finding(diff: Mapping[str, Any], steady: TraceFile, tf: TraceFile, location: SourceLocation | None) -> Finding:
    from gpuprof.runtimecodes import runtime_check

    spec = runtime_check("GP650")
    step = _metric(diff, "step_time")
    mean = _metric(diff, "step_time_mean")
    change, parts, ops = _changes(diff)
    growing = [p for p in parts if p[1] > 0] or parts
    top = growing[0][0] if growing else None
    w = tf.window
    a = w.anomaly if w is not None else None
    if a is not None and a.kind == "slowdown" and a.before_s is not None and a.after_s is not None:
        broke = (f"the job slowed down from step {a.onset}: step time {a.after_s * 1e3:.3g} ms against "
                 f"{a.before_s * 1e3:.3g} ms before")
    elif a is not None:
        broke = f"the steady state broke at step {a.onset}: {a.detail}"
    else:
        broke = "the steady state broke"
    what = ", ".join(f"{PART_WORDS[k]} {_ms(c)}" for k, c in parts) or "no part of the step moved by much"
    text = (f"{broke}. The anomaly window (steps {tf.first_step}-{tf.last_step}) against the steady window "
            f"(steps {steady.first_step}-{steady.last_step}): step time {_ms(change)}: {what}")
    if ops:
        text += "; most changed operators: " + ", ".join(f"{r['name']} {_ms(r['change_us'])}" for r in ops)
    mean_change = mean.get("change_us")
    from gpuprof.capture.job.windows import CAUSE_SHARE

    if top is not None and change > 0 and dict(parts)[top] < CAUSE_SHARE * change:
        # no measured part explains most of the added time: say what was measured, name no cause
        top = None
        text += (f"; no measured part explains at least {CAUSE_SHARE:.0%} of the added time")
        advice = "No part of the step measured in the two windows explains most of the change; compare them " \
                 "operator by operator with gpuprof diff."
    else:
        advice = _ADVICE.get(top or "", "Compare the two windows operator by operator with gpuprof diff.")
    advice += f" Both traces: gpuprof diff {steady.path} {tf.path}"
    return Finding(
        code=spec.code, name=spec.name, severity=spec.severity, message=text + ".", advice=advice,
        evidence=(Evidence("step_time_change", round(change, 1), unit="us", extra={
            "steady_window": [steady.first_step, steady.last_step], "anomaly_window": [tf.first_step, tf.last_step],
            "onset_step": a.onset if a is not None else None, "anomaly": a.kind if a is not None else None,
            "step_time_before_us": step.get("before"), "step_time_after_us": step.get("after"),
            "parts_change_us": {k: round(c, 1) for k, c in parts}, "noise_us": step.get("noise")}),),
        cost_us_per_step=float(mean_change) if isinstance(mean_change, (int, float)) and mean_change > 0 else None,
        location=location, origin="runtime", source=str(tf.path))


def contention_finding(episodes: Sequence[Anomaly], location: SourceLocation | None,
                       run_share: float | None = None) -> Finding:
    """GP656 (info): the job's training thread waited for a core (other processes' load): the slow streaks that
    wait explains (``episodes``, each with its measured wait share) and the share of the whole run it waited
    (``run_share``), one finding for the run."""
    from gpuprof.capture.job.windows import CAUSE_SHARE, host_load
    from gpuprof.runtimecodes import runtime_check

    spec = runtime_check("GP656")
    shares = [a.wait_share for a in episodes if a.wait_share is not None]
    loads = [a.load for a in episodes if a.load is not None]
    if not loads:
        now = host_load()
        loads = [now] if now is not None else []
    load = (f"; load average {loads[0][0]:.1f} on {loads[0][1]} core{'s' if loads[0][1] != 1 else ''}"
            if loads else "")
    parts = []
    if run_share is not None:
        parts.append(f"The training thread waited for a core {run_share:.0%} of the run (run-queue wait, "
                     f"/proc schedstat){load}: other processes had the CPU.")
    if episodes:
        first = episodes[0]
        when = ", ".join(f"from step {a.onset}" for a in episodes[:5]) + (" and more" if len(episodes) > 5 else "")
        parts.append(f"Steps slowed {len(episodes)} time{'s' if len(episodes) != 1 else ''} ({when}) while it "
                     f"waited up to {max(shares, default=0.0):.0%} of their time"
                     f"{load if run_share is None else ''}: that wait explains at least {CAUSE_SHARE:.0%} of "
                     f"the added time, so the job did not change. First: {first.detail}.")
    share = max([*shares, run_share or 0.0])
    first_ep = episodes[0] if episodes else None
    return Finding(
        code=spec.code, name=spec.name, severity=spec.severity, message=" ".join(parts),
        advice="Not the job's problem: its steps are slower because other processes share its cores. Measure on "
               "a quieter machine, or give the job cores of its own (taskset, a CPU quota for the other work); "
               "no recorded window was spent on it.",
        evidence=(Evidence("run_queue_wait_share", round(share, 3), extra={
            "run_wait_share": round(run_share, 3) if run_share is not None else None,
            "episodes": [[a.onset, a.detected, a.wait_share] for a in episodes[:50]],
            "step_time_before_us": round(first_ep.before_s * 1e6, 1) if first_ep and first_ep.before_s else None,
            "step_time_after_us": round(first_ep.after_s * 1e6, 1) if first_ep and first_ep.after_s else None,
            "load_average": loads[0][0] if loads else None, "cores": loads[0][1] if loads else None}),),
        location=location, origin="runtime")
