"""The hang watchdog: when no step finishes for the hang timeout, write where every thread waits.

A daemon thread (it never keeps the process alive; :meth:`Watchdog.stop` ends
it) looks at the session's step count every ``check_interval`` seconds, so a
step costs nothing. When the count has not moved for the timeout (the
``hang_timeout`` option; by default ``max(HANG_MIN_S, HANG_STEP_FACTOR x the
median step)``), it writes, once per stall:

* every thread's Python stack (``sys._current_frames()``) and faulthandler's
  dump of all threads (what the C level sees: a thread stuck in a native call
  with the GIL released still shows its Python frames);
* the Flight Recorder's dump of the process group's last collectives, where
  torch records one (``TORCH_FR_BUFFER_SIZE``, formerly
  ``TORCH_NCCL_TRACE_BUFFER_SIZE``, > 0; NCCL, and gloo in recent torch), as
  ``<worker>.flight_recorder.json`` beside the report;
* one GP651 finding naming the user's file:line the driving thread waits at
  (its innermost frame in user code), in the report at the end of the run.

The ranks of a torchrun job share the run directory, so ``hang.json`` holds
one entry per rank (``ranks``), each rank replacing its own under an
exclusive lock and writing the file atomically; ``hang.md`` is rewritten from
the merged list in the same critical section. The job is left alone: when a
step finishes again, the entry says it resumed (after how long) and one line
says so.
"""

from __future__ import annotations

import faulthandler
import json
import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from gpuprof.atomic import atomic_write
from gpuprof.capture.job.hangfile import read_entries, read_json
from gpuprof.findings import Evidence, Finding, SourceLocation

__all__ = ["HANG_MIN_S", "HANG_STEP_FACTOR", "HANG_SCHEMA_VERSION", "HangRecord", "effective_timeout",
           "hang_finding", "thread_stacks", "waiting_at", "culprit"]  # the thread: gpuprof.capture.job.watchdog

HANG_MIN_S = 300.0  # the default timeout is at least this...
HANG_STEP_FACTOR = 20.0  # ...and at least this many median steps
HANG_SCHEMA_VERSION = "1.0"
MAX_FRAMES = 200  # frames kept per thread (a runaway recursion stays bounded)

Frame = tuple[str, int, str]  # file, line, function


def effective_timeout(configured: float | None, step_s: Sequence[float]) -> float | None:
    """The timeout in seconds: ``configured`` when set (0: off, None), else the default from the steps so far."""
    if configured is not None:
        return configured if configured > 0 else None
    recent = step_s[-200:]
    med = statistics.median(recent) if recent else 0.0
    return max(HANG_MIN_S, HANG_STEP_FACTOR * med)


def process_group_timeout_s() -> float | None:
    """The default process group's own timeout in seconds (its backend's options), None without one or when
    this torch does not say; never imports torch."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not (dist.is_available() and dist.is_initialized()):
            return None
        import torch
        from torch.distributed import distributed_c10d

        group = distributed_c10d._get_default_group()
        found = []
        for device in ("cuda", "cpu"):
            try:
                found.append(group._get_backend(torch.device(device)).options._timeout.total_seconds())
            except Exception:  # noqa: BLE001 - no backend for that device
                continue
        return min(found) if found else None
    except Exception:  # noqa: BLE001 - an older torch, a group in a strange state: as without one
        return None


def watch_timeout(timeout: float | None, pg_timeout: float | None, step_s: Sequence[float]) -> tuple[float | None, bool]:
    """The watchdog's wait when the process group's own timeout is shorter than ``timeout``: 80% of it (at
    least 3 median steps), so the watchdog writes where every rank waits before the process group aborts the
    job; (the wait, True) then, else (``timeout``, False)."""
    if timeout is None or pg_timeout is None or pg_timeout <= 0 or pg_timeout > timeout:
        return timeout, False
    recent = step_s[-200:]
    early = max(0.8 * pg_timeout, 3 * statistics.median(recent) if recent else 0.0)
    return (early, True) if early < pg_timeout else (timeout, False)


def _frames(f: FrameType | None) -> list[Frame]:
    """Outermost first (as a traceback reads)."""
    out: list[Frame] = []
    while f is not None and len(out) < MAX_FRAMES:
        out.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
        f = f.f_back
    return out[::-1]


@dataclass(frozen=True)
class ThreadStack:
    name: str
    ident: int
    daemon: bool
    driver: bool  # the thread that drives the capture (steps the loop)
    frames: list[Frame]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "ident": self.ident, "daemon": self.daemon, "driver": self.driver,
                "frames": [{"file": f, "line": n, "function": fn} for f, n, fn in self.frames]}


def thread_stacks(driver: int | None, skip: int | None = None) -> list[ThreadStack]:
    """Every thread's Python stack now (``skip``: the calling watchdog's own), the driver first."""
    names = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        if ident == skip:
            continue
        t = names.get(ident)
        out.append(ThreadStack(t.name if t else f"thread {ident}", ident, bool(t and t.daemon), ident == driver,
                               _frames(frame)))
    return sorted(out, key=lambda s: (not s.driver, s.name))


def waiting_at(stack: ThreadStack | None) -> SourceLocation | None:
    """The innermost frame of the user's code (:func:`gpuprof.frames.is_user_file`) on ``stack``."""
    from gpuprof.frames import is_user_file

    if stack is None:
        return None
    for file, line, fn in reversed(stack.frames):
        if is_user_file(file):
            return SourceLocation(file, line, fn)
    return None


def _faulthandler_text() -> str:
    """faulthandler's dump of every thread (it needs a real file descriptor)."""
    with tempfile.TemporaryFile() as fh:
        faulthandler.dump_traceback(file=fh, all_threads=True)
        fh.seek(0)
        return fh.read(1 << 20).decode("utf-8", "replace")


def _flight_recorder(out_dir: Path, worker: str) -> tuple[str | None, str]:
    """The process group's Flight Recorder dump, where torch records one: (file written, note).

    torch records the last collectives of every process group (NCCL, and gloo in recent versions) when
    ``TORCH_FR_BUFFER_SIZE`` (formerly ``TORCH_NCCL_TRACE_BUFFER_SIZE``) is above 0. The JSON dump is
    preferred (readable); older versions have only the pickled one.
    """
    size = next((v.strip() for k in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
                 if (v := os.environ.get(k, "")).strip()), "")
    if not size.isdigit() or int(size) <= 0:
        return None, "Flight Recorder off (set TORCH_FR_BUFFER_SIZE, e.g. 2000, to record the collectives)"
    dist = sys.modules.get("torch.distributed")
    if dist is None or not getattr(dist, "is_initialized", lambda: False)():
        return None, "no torch.distributed process group: no Flight Recorder"
    try:
        import torch

        c10d = torch._C._distributed_c10d
        for name, suffix in (("_dump_fr_trace_json", "json"), ("_dump_fr_trace", "pickle"),
                             ("_dump_nccl_trace", "pickle")):
            dump = getattr(c10d, name, None)
            if dump is not None:
                data = dump()
                path = out_dir / f"{worker}.flight_recorder.{suffix}"
                atomic_write(path, data if isinstance(data, (bytes, str)) else bytes(data))
                return str(path), f"Flight Recorder dump of backend {dist.get_backend()} written"
        return None, "this torch has no Flight Recorder API"
    except Exception as err:  # noqa: BLE001 - the stacks are written whatever the dump does
        return None, f"Flight Recorder dump failed: {type(err).__name__}: {' '.join(str(err).split())[:300]}"


@dataclass
class HangRecord:
    """One rank's stall, as ``hang.json`` holds it (``ranks[]``)."""

    worker: str
    rank: int | None
    pid: int
    host: str
    step: int  # steps completed when the stall was seen (the stalled step is the next one)
    stalled_s: float
    timeout_s: float
    detected_at: float  # Unix time
    waiting_at: SourceLocation | None
    threads: list[ThreadStack]
    faulthandler: str = ""
    flight_recorder: str | None = None
    flight_recorder_note: str = ""
    resumed_at_step: int | None = None
    resumed_after_s: float | None = None
    finding: Finding | None = field(default=None, repr=False)
    pg_timeout_s: float | None = None  # the process group's own timeout, when shorter than the hang timeout
    series: dict[str, object] | None = None  # the watch's series up to the stall (capture.job.hangseries)

    def to_dict(self) -> dict[str, object]:
        loc = self.waiting_at
        return {
            "worker": self.worker, "rank": self.rank, "pid": self.pid, "host": self.host, "step": self.step,
            "stalled_s": round(self.stalled_s, 3), "timeout_s": self.timeout_s, "detected_at": self.detected_at,
            "waiting_at": None if loc is None else {"file": loc.file, "line": loc.line, "function": loc.function},
            "threads": [t.to_dict() for t in self.threads], "faulthandler": self.faulthandler,
            "flight_recorder": self.flight_recorder, "flight_recorder_note": self.flight_recorder_note,
            "resumed_at_step": self.resumed_at_step, "resumed_after_s": self.resumed_after_s,
            "finding": self.finding.to_dict() if self.finding is not None else None,
            "process_group_timeout_s": self.pg_timeout_s, "series": self.series,
        }


def _where(loc: SourceLocation | None) -> str:
    if loc is None:
        return "no line of the user's code (see the stacks)"
    return f"{loc.file}:{loc.line}" + (f" ({loc.function})" if loc.function else "")


def _where_shown(loc: SourceLocation | None) -> str:
    """:func:`_where` for the terminal: the file and function names inert (control characters, bidi
    overrides and line breaks as visible escapes, as the findings show them) and bounded."""
    from gpuprof.render.safe import clip

    if loc is None:
        return _where(loc)
    return f"{clip(loc.file, 300)}:{loc.line}" + (f" ({clip(loc.function, 200)})" if loc.function else "")


def hang_finding(rec: HangRecord, report: str, said: str | None = None) -> Finding:
    """GP651 for one rank's stall (``report``: where hang.md is; ``said``: the culprit, :func:`culprit`)."""
    from gpuprof.runtimecodes import runtime_check

    spec = runtime_check("GP651")
    who = f"rank {rec.rank}" if rec.rank is not None else "the process"
    resumed = (f"; it resumed {rec.resumed_after_s:.1f} s later, at step {rec.resumed_at_step}"
               if rec.resumed_after_s is not None else "")
    return Finding(
        code=spec.code, name=spec.name, severity=spec.severity,
        message=(f"no step finished for {rec.stalled_s:.1f} s after step {rec.step} (hang timeout "
                 f"{rec.timeout_s:g} s): {who} waits at {_where(rec.waiting_at)}{resumed}. "
                 + (f"{said}. " if said else "")
                 + (f"The process group's own timeout ({rec.pg_timeout_s:g} s) is shorter than the hang timeout: "
                    "the watchdog fired first, before the process group aborts the job. " if rec.pg_timeout_s else "")
                 + f"Every thread's stack is in {report}."),
        advice=("Look at the line each rank waits at: a rank that never reaches a collective (a barrier, an "
                "all-reduce) stalls every other rank inside that collective. Give the process group a timeout "
                "(init_process_group(timeout=...)) so a lost rank fails instead of hanging, and set "
                "TORCH_FR_BUFFER_SIZE for the Flight Recorder's record of the collectives."),
        evidence=(Evidence("stalled_s", round(rec.stalled_s, 3), threshold=rec.timeout_s, unit="s",
                           extra={"step": rec.step, "rank": rec.rank, "hang_report": report,
                                  "resumed_after_s": rec.resumed_after_s}),),
        location=rec.waiting_at, origin="runtime", source=report)


# ----------------------------------------------------------------------------- hang.json / hang.md
@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """An exclusive lock shared by the ranks writing ``hang.json`` (none where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(run_dir / ".hang.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_hang_files(run_dir: Path, rec: HangRecord) -> str | None:
    """Merge this rank's entry into ``hang.json`` and rewrite ``hang.md`` (see the module docstring); the
    culprit in words that the merged entries name (:func:`culprit`), as written, or None."""
    jpath, mpath = run_dir / "hang.json", run_dir / "hang.md"
    with _locked(run_dir):
        ranks = [r for r in read_entries(run_dir)[0] if r.get("worker") != rec.worker]
        ranks.append(rec.to_dict())
        ranks.sort(key=lambda r: (r.get("rank") if isinstance(r.get("rank"), int) else -1, str(r.get("worker"))))
        said = culprit(ranks)
        doc: dict[str, object] = {"hang_schema_version": HANG_SCHEMA_VERSION, "run_dir": str(run_dir),
                                  "culprit": said, "ranks": ranks}
        atomic_write(jpath, json.dumps(doc, indent=2) + "\n")
        atomic_write(mpath, hang_markdown(doc))
    return said


#: torch.distributed's Python functions that wait for the other ranks (a rank inside one waits for them)
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "barrier", "monitored_barrier", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list", "recv", "send",
    "wait", "_all_gather_base", "_reduce_scatter_base"})


def _in_collective(rank: dict[str, object]) -> str | None:
    """The collective the rank's driving thread waits in (its innermost ``torch/distributed`` frame that is
    one, :data:`COLLECTIVES`), or None."""
    threads = rank.get("threads")
    for t in threads if isinstance(threads, list) else []:
        if not isinstance(t, dict) or not t.get("driver"):
            continue
        frames = t.get("frames")
        for f in reversed(frames if isinstance(frames, list) else []):
            if not isinstance(f, dict):
                continue
            file, fn = str(f.get("file") or "").replace(os.sep, "/"), str(f.get("function") or "")
            if "/torch/distributed/" in file and fn in COLLECTIVES:
                return fn
    return None


def _at(rank: dict[str, object]) -> str:
    w = rank.get("waiting_at")
    if not isinstance(w, dict):
        return "no line of the user's code"
    return f"{os.path.basename(str(w.get('file')))}:{w.get('line')}"


def culprit(ranks: Sequence[dict[str, object]]) -> str | None:
    """The culprit in words, from the ranks' entries of ``hang.json``: the ranks not inside a collective while
    others wait in one never reached it ("rank 1 never reached the all_reduce that rank 0 waits in at
    train.py:15; rank 1 is at train.py:14"); None when every rank (or none) waits in a collective, or fewer
    than two ranks reported. Names are raw: the caller escapes them for its medium."""
    known = [r for r in ranks if isinstance(r.get("rank"), int) and r.get("resumed_at_step") is None]
    waiting = [(r, c) for r in known if (c := _in_collective(r)) is not None]
    elsewhere = [r for r in known if _in_collective(r) is None]
    if not waiting or not elsewhere:
        return None
    colls = sorted({c for _, c in waiting})
    w_ranks = [int(str(r["rank"])) for r, _ in waiting]
    places = sorted({_at(r) for r, _ in waiting})
    late = ", ".join(f"rank {r['rank']} is at {_at(r)}" for r in elsewhere[:8])
    who = ("rank " if len(elsewhere) == 1 else "ranks ") + ", ".join(str(r["rank"]) for r in elsewhere[:8])
    them = ("rank " if len(w_ranks) == 1 else "ranks ") + ", ".join(map(str, w_ranks[:8]))
    verb = "waits" if len(w_ranks) == 1 else "wait"
    return (f"{who} never reached the {'/'.join(colls)} that {them} {verb} in at {', '.join(places[:4])}; {late}")


def hang_into_report(path: Path, found: Finding) -> None:
    """Put GP651 ``found`` into the capture report at ``path``: the report written when the window closed, its
    earlier GP651 replaced; a report holding only the hang when there is none yet. Written atomically."""
    from gpuprof.report import Report

    raw = read_json(path, 256 << 20)  # a link, a FIFO: Unreadable (an OSError); damaged: ValueError
    doc = raw if isinstance(raw, dict) and raw.get("command") == "capture" else None
    found_list = doc.get("findings") if doc is not None else None
    if doc is None or not isinstance(found_list, list):
        from gpuprof.render.jsonout import render_json

        rep = Report(command="capture", findings=[found],
                     notes=["written when the hang was detected; the end-of-run report replaces it"])
        atomic_write(path, render_json(rep))
        return
    old: list[object] = list(found_list)
    kept = [f for f in old if not (isinstance(f, dict) and f.get("code") == found.code)]
    doc["findings"] = [*kept, json.loads(json.dumps(found.to_dict()))]
    raw_notes = doc.get("notes")
    notes: list[object] = list(raw_notes) if isinstance(raw_notes, list) else []
    note = "the hang (GP651) was added when it was detected; the end-of-run report rewrites this file"
    doc["notes"] = [*(n for n in notes if n != note), note]
    atomic_write(path, json.dumps(doc, indent=2) + "\n")


def _fence(text: str) -> str:
    return "```\n" + text.replace("```", "'''").rstrip("\n") + "\n```\n"


def hang_markdown(doc: dict[str, object]) -> str:
    """``hang.md`` from the merged ``hang.json`` document.

    Every name in it (files, functions, threads, the worker, host and run directory) came from the process
    or the file system and is escaped as the findings' markdown is (:func:`gpuprof.render.markdown.md_escape`
    for prose and table cells, ``md_code`` for paths): a newline cannot break the table, markup stays text.
    In the stacks' code blocks each name is :func:`gpuprof.render.safe.clip`-ped: control characters and
    line breaks shown as escapes, one frame per line.
    """
    from gpuprof.capture.job.hangseries import series_lines
    from gpuprof.render.markdown import md_code, md_escape
    from gpuprof.render.safe import clip, visible

    listed = doc.get("ranks")
    ranks = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
    lines = ["# gpuprof: hang report", "", f"Run directory: {md_code(str(doc.get('run_dir')))}. The job was left running.",
             "", "| rank | worker | steps done | no step for | waits at | resumed |", "|---|---|---|---|---|---|"]
    said = culprit(ranks)
    if said is not None:
        lines[2:2] = [f"**Culprit:** {md_escape(said)}.", ""]

    def where(r: dict[str, object], cell: bool = False) -> str:
        w = r.get("waiting_at")
        if not isinstance(w, dict):
            return "(no user line; see the stacks)"
        place = f"{w.get('file')}:{w.get('line')}"
        return f"{md_code(place, cell=cell)} ({md_escape(str(w.get('function')))})"

    def text(value: object) -> str:
        return md_escape(str(value))

    for r in ranks:
        resumed = (f"after {r.get('resumed_after_s')} s, at step {r.get('resumed_at_step')}"
                   if r.get("resumed_after_s") is not None else "no")
        lines.append(f"| {text(r.get('rank') if r.get('rank') is not None else '-')} | {text(r.get('worker'))} "
                     f"| {text(r.get('step'))} | {text(r.get('stalled_s'))} s | {where(r, cell=True)} | {text(resumed)} |")
    lines += series_lines(ranks)
    for r in ranks:
        lines += ["", f"## {text(r.get('worker'))} (PID {text(r.get('pid'))} on {text(r.get('host'))})", "",
                  f"Waits at {where(r)} after step {text(r.get('step'))}; hang timeout {text(r.get('timeout_s'))} s. "
                  f"{text(r.get('flight_recorder_note') or '')}"
                  + (f": {md_code(str(r.get('flight_recorder')))}." if r.get("flight_recorder") else "."),
                  ""]
        threads = r.get("threads")
        for t in threads if isinstance(threads, list) else []:
            if not isinstance(t, dict):
                continue
            role = " (drives the capture)" if t.get("driver") else (" (daemon)" if t.get("daemon") else "")
            fl = t.get("frames")
            frames = [f for f in fl if isinstance(f, dict)] if isinstance(fl, list) else []
            stack = "\n".join(f'  File "{clip(f.get("file"))}", line {clip(f.get("line"))}, in {clip(f.get("function"))}'
                              for f in frames)
            lines += [f"### thread {text(t.get('name'))}{role}", "", _fence(stack or "(no Python frames)")]
        if r.get("faulthandler"):
            lines += ["### faulthandler (every thread, as the interpreter sees them)", "",
                      _fence("\n".join(visible(line) for line in str(r.get("faulthandler")).splitlines()))]
    return "\n".join(lines) + "\n"
