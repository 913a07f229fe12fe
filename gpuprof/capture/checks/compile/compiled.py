"""torch.compile diagnostics during capture (GP801-GP804).

What Dynamo does while the loop runs, from its documented, public-facing
instrumentation only, so the user's compilation is never altered:

* **graph breaks** (GP801): Dynamo logs every graph break to its
  ``graph_breaks`` logging artifact (what ``TORCH_LOGS=graph_breaks`` shows)
  with the user's file:line and the reason. A handler on that one logger
  collects them; when the user did not enable the artifact, the logger is
  raised to DEBUG with ``propagate`` off for the capture (nothing reaches the
  console) and restored afterwards.
* **recompilations** (GP802) and **CUDA graphs skipped** (GP804): Dynamo's
  compilation metrics (``torch._dynamo.utils.get_compilation_metrics()``,
  one record per compiled frame: the guard that failed, the reason
  ``mode="reduce-overhead"`` did not use CUDA graphs), read after a step in
  which something compiled, and at the end. CUDA-graph skips found while the
  compiled code runs (inputs mutated outside the graph, the re-recording
  limit reached by changing shapes) reach no metrics record: they come from
  inductor's ``cudagraphs`` log, which every skip goes through.
* **compile time inside steps** (GP803): Dynamo's compile-start/-end
  callbacks (``torch._dynamo.callback``), which also fire for the lazy
  backward compilation and CUDA-graph recording, timed and charged to the
  step running then. Compiling in step 0 is expected (and reported only as a
  number); compiling later means recompilations or new code paths.

Every callback and the log handler catch their own failures (a failure
inside Dynamo's compilation would break the user's training); failures are
kept and turned into one warning by the session.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Callable

from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.frames import is_user_file
from gpuprof.runtimecodes import runtime_check

__all__ = ["CompileMonitor", "GraphBreak", "parse_graph_break", "compile_findings"]

# '... in user code at /path/model.py:42' (full and "duplicate" forms of Dynamo's graph-break log line)
_AT = re.compile(r"in user code at (.+):(\d+)\s*$", re.M)
_FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (\S+)\s*$', re.M)
_DOC_URL = re.compile(r"https://\S+/gb/gb\d+\.html")
_RESUME = re.compile(r"^torch_dynamo_resume_in_(.+)_at_(\d+)$")
_CUDAGRAPH_ADVICE = (
    "mode=\"reduce-overhead\" replays a CUDA graph only when the compiled code allows it: no CPU tensors or "
    "CPU-GPU copies inside, no inputs mutated outside the graph (other than buffers), no shapes that change "
    "from call to call (each new shape re-records; pad or bucket them, or mark them dynamic) and no ops that "
    "cannot be graphed. Fix the reason shown, or move that part out of the compiled region."
)
REASON_CHARS = 400  # a graph-break reason kept in findings (Dynamo's hints can be long)


@dataclass(frozen=True)
class GraphBreak:
    """One graph break as Dynamo logged it."""

    file: str
    line: int
    function: str | None
    reason: str  # Dynamo's explanation, on one line
    doc_url: str | None  # Dynamo's page for this kind of graph break


def parse_graph_break(text: str) -> GraphBreak | None:
    """The graph break in one message of Dynamo's ``graph_breaks`` log (None when it is not one)."""
    at = _AT.search(text)
    if at is None or "Graph Break Reason:" not in text:
        return None
    file, line = at.group(1), int(at.group(2))
    body = text.split("Graph Break Reason:", 1)[1]
    for stop in ("User code traceback:", "Developer debug context:", "For more details about this graph break"):
        body = body.split(stop, 1)[0]
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    # Dynamo's first line is generic ("Encountered graph break when attempting to trace CALL ..."):
    # the specific explanation follows it
    explanation = [ln for ln in lines if ln.startswith("Explanation:")]
    head = [ln for ln in lines if not ln.startswith(("Hint:", "Explanation:", "Encountered graph break"))]
    parts = head[:1] + [e[len("Explanation:"):].strip() for e in explanation[:1]]
    reason = ": ".join(parts) if parts else (lines[0] if lines else "unknown reason")
    function = None
    for m in _FRAME.finditer(text):  # the traceback's innermost frame at the break's line names the function
        if m.group(1) == file and int(m.group(2)) == line:
            function = m.group(3)
    url = _DOC_URL.search(text)
    return GraphBreak(file, line, function, reason[:REASON_CHARS], url.group(0) if url else None)


@dataclass
class CompiledFrame:
    """What the compilation metrics say about one compiled frame (a function, or a resume after a break)."""

    name: str
    file: str | None
    line: int | None
    compiles: int = 0
    recompile_reasons: list[str] = field(default_factory=list)
    cudagraph_skips: list[str] = field(default_factory=list)


class _LogCounter(logging.Handler):
    """Counts what ``parse`` finds in one torch log's messages into ``counts``; failures go to ``errors``."""

    def __init__(self, what: str, parse: Callable[[str], Any], counts: Counter[Any], errors: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.what, self.parse, self.counts, self.errors = what, parse, counts, errors

    def emit(self, record: logging.LogRecord) -> None:
        try:
            found = self.parse(record.getMessage())
            if found is not None:
                self.counts[found] += 1
        except Exception as err:  # noqa: BLE001 - inside Dynamo/Inductor: never raise; the session warns once
            self.errors.append(f"{self.what} log: {type(err).__name__}: {err}")


# Every CUDA-graph skip goes through inductor's log_cudagraph_skip_and_bump_counter, which logs it here;
# those found while the graph runs (inputs mutated outside the graph, the re-recording limit hit by
# changing shapes) reach no compilation metrics record.
CUDAGRAPH_LOGGER = "torch._inductor.cudagraph_utils.__cudagraphs"


@dataclass(frozen=True)
class CudagraphSkip:
    """One reason inductor gave for running compiled code without CUDA graphs, from its log."""

    reason: str  # the message's first line ("skipping cudagraphs due to mutated inputs (1 instances)...")
    location: SourceLocation | None  # the first user frame the message names ("Found from: File ...")


def parse_cudagraph_skip(text: str) -> CudagraphSkip | None:
    """The skip in one message of inductor's ``cudagraphs`` log (None for its other messages)."""
    if not text.startswith("skipping cudagraph"):
        return None
    first = text.splitlines()[0].strip()
    first = first.split(" Found from", 1)[0].rstrip(" .:") if " Found from" in first else first
    loc = None
    for m in _FRAME.finditer(text):
        if is_user_file(m.group(1)):
            loc = SourceLocation(m.group(1), int(m.group(2)), m.group(3))
            break
    return CudagraphSkip(first[:REASON_CHARS], loc)


class CompileMonitor:
    """Collects Dynamo's graph breaks, recompilations and compile time while installed."""

    def __init__(self, step_of: Callable[[], int]) -> None:
        self.step_of = step_of  # the index of the step running now
        self.breaks: Counter[GraphBreak] = Counter()
        self.frames: dict[tuple[str, str | None, int | None], CompiledFrame] = {}
        self.compile_s_by_step: dict[int, float] = {}
        self.cudagraph_log_skips: Counter[CudagraphSkip] = Counter()
        self.errors: list[str] = []  # failures inside callbacks, warned about by the session
        self.installed = False
        self.compiled_since_drain = False
        self._t0_us = 0
        self._seen_ids: set[tuple[str | None, int | None]] = set()
        self._started: float | None = None
        self._loggers: list[tuple[logging.Logger, int, bool]] = []  # logger, its level, its propagate
        self._handlers: list[_LogCounter] = []
        self._gb_counter_before: Counter[str] = Counter()

    # ------------------------------------------------------------------ install

    def install(self) -> bool:
        """Attach to Dynamo if it is loaded (False: not yet; try again later). Idempotent."""
        if self.installed:
            return True
        if "torch._dynamo" not in sys.modules:
            return False  # nothing can compile without it; importing it costs about a second
        from torch._dynamo.callback import callback_handler
        from torch._dynamo.utils import counters

        self._t0_us = time.time_ns() // 1000
        self._gb_counter_before = Counter(counters["graph_break"])
        callback_handler.register_start_callback(self._on_start)
        callback_handler.register_end_callback(self._on_end)
        self.installed = True
        self._attach_log()
        return True

    def _attach_log(self) -> None:
        from torch._logging._internal import log_registry

        skips = _LogCounter("cudagraphs", parse_cudagraph_skip, self.cudagraph_log_skips, self.errors)
        self._listen(logging.getLogger(CUDAGRAPH_LOGGER), skips)  # named before inductor is imported
        names = [n for n in getattr(log_registry, "artifact_log_qnames", ()) if n.endswith(".__graph_breaks")]
        if not names:
            return  # another torch: GP801 falls back to Dynamo's reason counters (no source line)
        breaks = _LogCounter("graph-break", parse_graph_break, self.breaks, self.errors)
        for name in names:
            self._listen(logging.getLogger(name), breaks)

    def _listen(self, lg: logging.Logger, handler: _LogCounter) -> None:
        self._loggers.append((lg, lg.level, lg.propagate))
        if not lg.isEnabledFor(logging.DEBUG):  # the user did not ask for these logs: keep them off the console
            lg.setLevel(logging.DEBUG)
            lg.propagate = False
        lg.addHandler(handler)
        self._handlers.append(handler)

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        try:
            self.drain()
        finally:
            from torch._dynamo.callback import callback_handler

            for lst, cb in ((callback_handler.start_callbacks, self._on_start),
                            (callback_handler.end_callbacks, self._on_end)):
                if cb in lst:
                    lst.remove(cb)
            for lg, level, propagate in self._loggers:
                for handler in self._handlers:
                    lg.removeHandler(handler)  # a no-op on the loggers it was not added to
                lg.setLevel(level)
                lg.propagate = propagate
            self._loggers = []
            self._handlers = []

    # ------------------------------------------------------------------ callbacks (inside Dynamo)

    def _on_start(self, args: Any) -> None:
        try:
            self._started = perf_counter()
        except Exception as err:  # noqa: BLE001 - inside Dynamo: never raise
            self.errors.append(f"compile-start callback: {type(err).__name__}: {err}")

    def _on_end(self, args: Any) -> None:
        try:
            if self._started is not None:
                step = self.step_of()
                self.compile_s_by_step[step] = self.compile_s_by_step.get(step, 0.0) + perf_counter() - self._started
                self._started = None
            self.compiled_since_drain = True
        except Exception as err:  # noqa: BLE001 - inside Dynamo: never raise
            self.errors.append(f"compile-end callback: {type(err).__name__}: {err}")

    # ------------------------------------------------------------------ metrics

    def drain(self) -> None:
        """Read Dynamo's compilation metrics recorded since the capture started (after a step that compiled)."""
        self.compiled_since_drain = False
        if not self.installed and not self._t0_us:
            return
        from torch._dynamo.utils import get_compilation_metrics

        for m in get_compilation_metrics():
            start = getattr(m, "start_time_us", None)
            if start is not None and start < self._t0_us:
                continue  # compiled before the capture started
            key = (getattr(m, "compile_id", None), start)
            if key in self._seen_ids:
                continue
            self._seen_ids.add(key)
            self.add_metrics(m)

    def add_metrics(self, m: Any) -> None:
        """Count one ``CompilationMetrics`` record (any object with its attribute names)."""
        name = getattr(m, "co_name", None) or "<unknown>"
        file = getattr(m, "co_filename", None)
        line = getattr(m, "co_firstlineno", None)
        fr = self.frames.setdefault((name, file, line), CompiledFrame(name, file, line))
        fr.compiles += 1
        reason = getattr(m, "recompile_reason", None)
        if reason:
            fr.recompile_reasons.append(str(reason))
        skip = getattr(m, "cudagraph_skip_reason", None)
        if skip:
            fr.cudagraph_skips.append(str(skip))

    def unlocated_breaks(self) -> Counter[str]:
        """Graph-break reasons Dynamo counted during the capture (``counters['graph_break']``), no lines."""
        from torch._dynamo.utils import counters

        now = Counter(counters["graph_break"])
        now.subtract(self._gb_counter_before)
        return +now


# ---------------------------------------------------------------------- findings


def frame_label(fr: CompiledFrame) -> str:
    """``forward`` or ``forward, after the graph break at line 9`` (Dynamo's resume functions)."""
    m = _RESUME.match(fr.name)
    if m:
        return f"`{m.group(1)}` after the graph break at line {m.group(2)}"
    return f"`{fr.name}`"


def _first_reason(reasons: list[str]) -> str:
    # Dynamo prefixes the cache entry ("0/0: tensor 'x' size mismatch ..."); several guards are ';'-joined
    return re.sub(r"^\d+/\d+:\s*", "", reasons[0]).strip()


def compile_findings(mon: CompileMonitor, total_step_s: float, steps: int,
                     min_compile_share: float) -> list[Finding]:
    """GP801-GP804 from what the monitor saw (see the module docstring)."""
    out: list[Finding] = []
    # GP801: one finding per source line that broke the graph
    by_site: dict[tuple[str, int], list[tuple[GraphBreak, int]]] = {}
    for gb, n in mon.breaks.items():
        by_site.setdefault((gb.file, gb.line), []).append((gb, n))
    check = runtime_check("GP801")
    for (file, line), items in sorted(by_site.items()):
        items.sort(key=lambda t: -t[1])
        gb = items[0][0]
        n = sum(c for _, c in items)
        out.append(Finding(
            code="GP801", name=check.name, severity=check.severity,
            message=(f"torch.compile graph break at {file}:{line}"
                     + (f" in `{gb.function}`" if gb.function else "") + f": {gb.reason} "
                     f"(compilations that broke here: {n})"),
            advice=("A graph break splits the compiled code in two graphs with Python in between: no fusion "
                    "across it, and each side is guarded and recompiled on its own. Move the call out of the "
                    "compiled code (print/logging, .item()/.tolist(), numpy, data-dependent if on a tensor), "
                    "wrap it in a function decorated with torch.compiler.disable, or see Dynamo's page for this "
                    "break. torch._dynamo.explain(model)(x) lists every break; fullgraph=True makes them errors."),
            evidence=(Evidence("graph_breaks", n, 0, "compilations",
                               extra={"reason": gb.reason, "doc": gb.doc_url or ""}),),
            location=SourceLocation(file, line, gb.function), origin="runtime", source=f"{file}:{line}",
        ))
    if not by_site:
        unlocated = mon.unlocated_breaks()
        for reason, n in unlocated.most_common(5):
            first = next((ln.strip() for ln in reason.splitlines() if ln.strip()), reason)
            out.append(Finding(
                code="GP801", name=check.name, severity=check.severity,
                message=f"torch.compile graph break: {first[:REASON_CHARS]} (graph breaks counted: {n})",
                advice="Run with TORCH_LOGS=graph_breaks to see the source line; torch._dynamo.explain(model)(x) "
                       "lists every break.",
                evidence=(Evidence("graph_breaks", n, 0, "breaks"),), origin="runtime",
            ))
    # GP802: recompilations per compiled frame
    check = runtime_check("GP802")
    for fr in mon.frames.values():
        if not fr.recompile_reasons:
            continue
        distinct = list(dict.fromkeys(_first_reason([r]) for r in fr.recompile_reasons))
        where = f" ({fr.file}:{fr.line})" if fr.file else ""
        shape = any("size mismatch" in r or "stride mismatch" in r for r in distinct)
        out.append(Finding(
            code="GP802", name=check.name, severity=check.severity,
            message=(f"torch.compile recompiled {frame_label(fr)}{where} during the capture "
                     f"(recompilations: {len(fr.recompile_reasons)}); guard that failed: {distinct[0]}"
                     + (f" (and {len(distinct) - 1} other reasons)" if len(distinct) > 1 else "")),
            advice=("Each recompilation stops the step to trace and compile again, and after "
                    "torch._dynamo.config.recompile_limit (8) Dynamo gives up and runs the frame eagerly. "
                    + ("Shapes changed: keep them constant (DataLoader(drop_last=True), pad to a few fixed "
                       "sizes) or mark the dimension dynamic (torch._dynamo.mark_dynamic(x, 0), or "
                       "torch.compile(dynamic=True))." if shape else
                       "A guarded value changed (a dtype, a Python int/float/bool argument, a global, a "
                       "module attribute): keep it constant during training, or pass numbers as tensors.")),
            evidence=(Evidence("recompilations", len(fr.recompile_reasons), 0, "recompilations",
                               extra={"reasons": distinct[:5], "frame": fr.name}),),
            location=SourceLocation(fr.file, fr.line, fr.name) if fr.file else None,
            origin="runtime", source=fr.name,
        ))
    # GP803: compile time in steps after the first
    later = {s: t for s, t in mon.compile_s_by_step.items() if s >= 1}
    step0_s = mon.compile_s_by_step.get(0, 0.0)
    spent = sum(later.values())
    if later and total_step_s > 0 and spent / total_step_s >= min_compile_share:
        check = runtime_check("GP803")
        shown = ", ".join(str(s) for s in sorted(later)[:8]) + (" ..." if len(later) > 8 else "")
        out.append(Finding(
            code="GP803", name=check.name, severity=check.severity,
            message=(f"torch.compile compiled inside steps after the first (steps: {shown}): "
                     f"compile time {spent:.3g} s, {spent / total_step_s:.0%} of the {steps} steps' time "
                     f"(step 0 compiled for {step0_s:.3g} s, expected)"),
            advice=("Compiling after the first step means recompilations (GP802) or code paths first taken "
                    "later (an eval branch, the last smaller batch): keep shapes and Python values stable, "
                    "mark dynamic dimensions, and warm every path up before timing. Leave these steps out "
                    "of benchmarks."),
            evidence=(Evidence("compile_time_after_step0", round(spent, 6), 0, "s",
                               extra={"steps": sorted(later)[:50], "step0_compile_s": round(step0_s, 6)}),),
            origin="runtime",
        ))
    # GP804: CUDA graphs skipped (mode="reduce-overhead")
    check = runtime_check("GP804")
    for fr in mon.frames.values():
        if not fr.cudagraph_skips:
            continue
        reasons = list(dict.fromkeys(fr.cudagraph_skips))
        where = f" ({fr.file}:{fr.line})" if fr.file else ""
        out.append(Finding(
            code="GP804", name=check.name, severity=check.severity,
            message=f"CUDA graphs were not used for {frame_label(fr)}{where}: {reasons[0]}",
            advice=_CUDAGRAPH_ADVICE,
            evidence=(Evidence("cudagraph_skipped", len(fr.cudagraph_skips), 0, "compilations",
                               extra={"reasons": reasons[:5]}),),
            location=SourceLocation(fr.file, fr.line, fr.name) if fr.file else None,
            origin="runtime", source=fr.name,
        ))
    # ... and those only inductor's log tells (found while the graphs run), one finding per reason and line
    known = {r for fr in mon.frames.values() for r in fr.cudagraph_skips}
    for skip, n in mon.cudagraph_log_skips.most_common(5):
        if any(skip.reason in r or r in skip.reason for r in known):
            continue
        where = f" ({skip.location.file}:{skip.location.line})" if skip.location else ""
        out.append(Finding(
            code="GP804", name=check.name, severity=check.severity,
            message=f"CUDA graphs were not used{where}: {skip.reason}",
            advice=_CUDAGRAPH_ADVICE,
            evidence=(Evidence("cudagraph_skipped", n, 0, "times", extra={"reasons": [skip.reason]}),),
            location=skip.location, origin="runtime",
            source=f"{skip.location.file}:{skip.location.line}" if skip.location else None,
        ))
    return out
