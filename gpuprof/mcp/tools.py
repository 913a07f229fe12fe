"""The tools ``gpuprof mcp`` serves: the commands' own library paths, their JSON, and their error lines.

Each tool takes the arguments its command takes (names as in the JSON schema it declares), passes every
file name through the server's roots (:mod:`gpuprof.mcp.roots`), calls the function the command line
calls (:mod:`gpuprof.commands`: ``analysis_report``, ``compare``, ``memory_report``, ``read_history``, ``export_tables``,
``explained``) with the same limits, and answers with what ``--format json`` prints, as text and as
structured content, after a short summary. A refusal or a bad input is a tool result with ``isError``
and the line the command line prints (``gpuprof: error: PATH: problem``), so the agent can correct
itself; a gpuprof bug is ``gpuprof: internal error: ...``. Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from gpuprof.errors import GpuprofError, UsageError
from gpuprof.mcp.roots import Roots
from gpuprof.mcp.wire import INVALID_PARAMS, JsonObj, ProgressSink, ProtocolError, check_stop
from gpuprof.redact import scrub
from gpuprof.render.safe import visible

__all__ = ["Toolbox", "TOOL_NAMES"]

Schema = dict[str, Any]  # a JSON schema, as tools/list declares it
_STR: Schema = {"type": "string"}
_CODES: Schema = {"type": "array", "items": _STR, "description": "Finding codes, prefixes or names (GP101, GP2, host-sync)."}
_OPTIONS: Schema = {"type": "array", "items": _STR,
            "description": "Thresholds as CODE.NAME=VALUE, e.g. GP101.min_utilization=0.6 (see the explain tool)."}
_MAX_LIST = 1024  # names in one array argument: far beyond the ranks of a real job's traces given one by one


class ArgumentError(GpuprofError):
    """An argument of the wrong type, missing or unknown: a usage error (the command line's exit 2)."""


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    properties: dict[str, Schema]
    required: tuple[str, ...]
    # (the server's tools, the checked arguments, where progress goes) -> (summary, the JSON document)
    run: Callable[[Toolbox, dict[str, Any], ProgressSink | None], tuple[str, dict[str, Any]]]
    read_only: bool = True

    def describe(self, open_world: bool) -> JsonObj:
        """The tool as tools/list gives it; ``open_world``: the server has URL roots (it reaches other machines)."""
        return {"name": self.name, "title": self.title, "description": self.description,
                "inputSchema": {"type": "object", "properties": self.properties, "required": list(self.required),
                                "additionalProperties": False},
                "annotations": {"title": self.title, "readOnlyHint": self.read_only,
                                "openWorldHint": open_world and self.name not in ("explain", "rules")}}

    def check(self, args: JsonObj) -> dict[str, Any]:
        """``args`` checked against the schema: required present, nothing unknown, every value of its type."""
        unknown = sorted(set(args) - set(self.properties))
        if unknown:
            raise ArgumentError(f"{self.name}: unknown argument {unknown[0][:80]!r} "
                                f"(arguments: {', '.join(self.properties)})")
        for key in self.required:
            if key not in args:
                raise ArgumentError(f"{self.name}: the argument {key!r} is required")
        out: dict[str, Any] = {}
        for key, value in args.items():
            schema = self.properties[key]
            if not _fits(value, schema):
                raise ArgumentError(f"{self.name}: {key!r} must be {_wanted(schema)}")
            out[key] = value
        return out


def _fits(value: object, schema: Schema) -> bool:
    if "anyOf" in schema:
        return any(_fits(value, s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "string":
        ok = isinstance(value, str) and "\0" not in value
        return ok and ("enum" not in schema or value in schema["enum"])
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        low, high = schema.get("minimum", 0), schema.get("maximum", 2**31)
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if kind == "array":
        if not isinstance(value, list) or len(value) > _MAX_LIST or (schema.get("minItems") and not value):
            return False
        return all(_fits(v, schema.get("items", {})) for v in value)
    return False


def _wanted(schema: Schema) -> str:
    if "anyOf" in schema:
        return " or ".join(_wanted(s) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    if schema.get("type") == "array":
        return f"a list of at most {_MAX_LIST} strings"
    if schema.get("type") == "boolean":
        return "true or false"
    if schema.get("type") == "integer":
        return f"an integer from {schema.get('minimum', 0)} to {schema.get('maximum', 2**31)}"
    return "a string"


def _names(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _doc(text: str) -> dict[str, Any]:
    """A command's JSON output parsed back: the tool's structured answer (whatever the command's schema holds)."""
    doc = json.loads(text)
    assert isinstance(doc, dict)
    return doc


def _count_line(findings: list[Any]) -> str:
    by: dict[str, int] = {}
    for f in findings:
        if isinstance(f, dict):
            by[str(f.get("severity"))] = by.get(str(f.get("severity")), 0) + 1
    parts = [f"{by[s]} {s}" for s in ("error", "warning", "info") if s in by]
    return f"{len(findings)} findings" + (f" ({', '.join(parts)})" if parts else "")


def _findings_lines(findings: list[Any], most: int = 10) -> list[str]:
    lines = [f"- {f.get('code')} {f.get('severity')}: {' '.join(str(f.get('message', '')).split())[:200]}"
             for f in findings[:most] if isinstance(f, dict)]
    return lines + ([f"- ... and {len(findings) - most} more"] if len(findings) > most else [])


def _report_summary(command: str, doc: dict[str, Any]) -> str:
    from gpuprof.saved import RunFigures, saved_report
    from gpuprof.units import fmt_us

    traces = saved_report(doc).traces  # the report the tool answers with: read as a saved one is
    findings = list(doc.get("findings", []))
    head = f"gpuprof {command}: "
    if traces:
        step = RunFigures.of_traces(traces).step_time_us  # the run's step time, as history and diff state it
        head += f"{len(traces)} trace{'s' if len(traces) != 1 else ''}"
        head += f", median step time {fmt_us(step)}; " if step is not None else "; "
    return "\n".join([head + _count_line(findings), *_findings_lines(findings)])


# --- the tools ------------------------------------------------------------------------------------------


def _analyze(box: Toolbox, a: dict[str, Any], progress: ProgressSink | None) -> tuple[str, dict[str, Any]]:
    from gpuprof.commands.analyze import analysis_report
    from gpuprof.render import render

    paths = [box.roots.input(p) for p in _names(a["paths"])]
    report = analysis_report(paths, a.get("select", []), a.get("ignore", []), a.get("options", []),
                             progress=_reading(progress) if progress is not None else None,
                             timeline=a.get("timeline") is True and a.get("views") is not False)
    doc = _doc(render(report, "json", color=False))
    if a.get("views") is False:  # the per-trace tables and timeline (most of a real report's bytes): on request
        for t in doc.get("traces", []):
            if isinstance(t, dict):
                t.pop("views", None)
                t.pop("timeline", None)  # the lanes the --html page and the TensorBoard tab draw
    return _report_summary("analyze", doc), doc


def _reading(progress: ProgressSink) -> Callable[[Any], Callable[[int, int], None]]:
    """A progress factory for the analysis (one callback per trace read): bytes read over the traces so far, out
    of the bytes of the traces met so far (exact for one trace; with several, the total grows as each begins)."""
    base = [0.0, 0.0]  # bytes of the traces done, bytes of the current one so far

    def factory(path: Any) -> Callable[[int, int], None]:
        base[0] += base[1]
        base[1] = 0.0
        name = visible(scrub(str(getattr(path, "name", path))))

        def update(done: int, total: int) -> None:
            base[1] = float(done)
            progress(base[0] + done, base[0] + total if total else None, f"reading {name}: {done:,} of {total:,} bytes")

        return update

    return factory


def _diff(box: Toolbox, a: dict[str, Any], progress: ProgressSink | None) -> tuple[str, dict[str, Any]]:
    from gpuprof.commands.diff import compare, diff_json

    before, after = box.roots.input(a["before"]), box.roots.input(a["after"])
    diff, _ = compare(before, after, a.get("fail_on_regression"), a.get("metric", "step_time"), None)
    doc = _doc(diff_json(diff))
    reg = doc.get("regression")
    verdict = ""
    if isinstance(reg, dict):
        verdict = f"; {reg.get('metric')} {'REGRESSED' if reg.get('regressed') else 'no regression'}"
    from gpuprof.units import fmt_us

    step = next((m for m in doc.get("metrics", []) if isinstance(m, dict) and m.get("name") == "step_time"), None)
    figures = "compared"
    if step is not None and isinstance(step.get("before"), (int, float)) and isinstance(step.get("after"), (int, float)):
        figures = (f"step time {fmt_us(step['before'])} -> {fmt_us(step['after'])}"
                   + (" (within noise)" if step.get("within_noise") else ""))
    found = doc.get("findings")
    if isinstance(found, dict):
        figures += "; findings " + ", ".join(f"{len(v)} {k}" for k, v in found.items() if isinstance(v, list))
    return f"gpuprof diff: {figures}{verdict}", doc


def _memory(box: Toolbox, a: dict[str, Any], progress: ProgressSink | None) -> tuple[str, dict[str, Any]]:
    from gpuprof.commands.memory import memory_diff_report, memory_report
    from gpuprof.commands.options import parse_option_settings
    from gpuprof.render import render
    from gpuprof.units import parse_bytes

    file = box.roots.input(a["file"])
    settings = parse_option_settings(tuple(a.get("options", [])), ("memory",), "gpuprof memory")
    select, ignore = a.get("select", []), a.get("ignore", [])
    if a.get("diff") or "after" in a:  # gpuprof memory diff FILE [AFTER]
        if "device_memory" in a:
            raise ArgumentError("memory: 'device_memory' applies to one file, not to a diff")
        after = box.roots.input(a["after"]) if "after" in a else None
        report = memory_diff_report(file, after, select, ignore, settings, a.get("top", 15))
    else:
        device_memory = None
        if "device_memory" in a:
            try:
                device_memory = parse_bytes(a["device_memory"])
            except ValueError as err:
                raise ArgumentError(f"memory: 'device_memory': {err}") from None
        report, _, _ = memory_report(file, select, ignore, settings, device_memory, a.get("top", 10))
    doc = _doc(render(report, "json", color=False))
    return _report_summary("memory", doc), doc


def _history(box: Toolbox, a: dict[str, Any], progress: ProgressSink | None) -> tuple[str, dict[str, Any]]:
    from gpuprof.history.render import history_json
    from gpuprof.history.runs import read_history

    doc = _doc(history_json(read_history(box.roots.input(a["logdir"]))))
    runs, changes = doc.get("runs", []), doc.get("change_points", [])
    lines = [f"gpuprof history: {len(runs)} runs, {len(changes)} change points"]
    lines += [f"- {c.get('run')}: {c.get('metric')} {c.get('before')} -> {c.get('after')}"
              for c in changes if isinstance(c, dict)][:10]
    return "\n".join(lines), doc


def _export(box: Toolbox, a: dict[str, Any], progress: ProgressSink | None) -> tuple[str, dict[str, Any]]:
    import shutil

    from gpuprof.commands.export import export_tables

    source = box.roots.input(a["source"])
    fmt = a.get("format", "csv")
    directory, temporary = box.roots.output_dir(a.get("output"))
    try:
        written, counts = export_tables(source, fmt, directory, None)
        check_stop()  # told to stop meanwhile: no answer will name the folder, so it must not stay
    except BaseException:
        if temporary:  # ours, empty or half-filled: nothing left behind for a refused export
            shutil.rmtree(directory, ignore_errors=True)
        raise
    doc: dict[str, Any] = {"directory": directory, "temporary": temporary, "format": fmt,
                    "tables": {name: {"file": str(path), "rows": counts[name]}
                               for name, path in zip(counts, written)}}
    rows = ", ".join(f"{name} {n}" for name, n in counts.items())
    return f"gpuprof: {len(written)} {fmt} tables written to {directory} (rows: {rows})", doc


def _explain(box: Toolbox, a: dict[str, Any], progress: ProgressSink | None) -> tuple[str, dict[str, Any]]:
    from gpuprof.codes import explain_text
    from gpuprof.commands.explain import explained

    spec, note = explained(a["code"])
    text = explain_text(spec)
    doc: dict[str, Any] = {"code": spec.code, "name": spec.name, "severity": spec.severity_text, "title": spec.title,
                    "reported_by": spec.reported_by, "aliases": list(spec.aliases), "docs_page": spec.docs_page,
                    "options": [{"name": o.name, "default": o.default, "help": o.help, "unit": o.unit}
                                for o in spec.options],
                    "text": text, "note": note}
    return text + (f"\nnote: {note}" if note else ""), doc


def _rules(box: Toolbox, a: dict[str, Any], progress: ProgressSink | None) -> tuple[str, dict[str, Any]]:
    from gpuprof.codes import catalogue

    codes = [{"code": c.code, "name": c.name, "severity": c.severity_text, "reported_by": c.reported_by,
              "title": c.title} for c in catalogue()]
    return "\n".join(f"{c['code']} {c['name']} ({c['severity']}): {c['title']}" for c in codes), {"codes": codes}


_PATHS: Schema = {"anyOf": [_STR, {"type": "array", "items": _STR, "minItems": 1}],
          "description": "A trace file (.json/.json.gz), a run folder, a saved report.json, or a list of them "
                         "(the ranks of one job). Relative names are taken under the server's roots."}
TOOLS = (
    Tool("analyze", "Diagnose PyTorch profiler traces",
         "What `gpuprof analyze PATHS --format json` prints: per-trace step-time breakdowns and the findings, each "
         "with its numbers, evidence, source line, cost per step and fix.",
         {"paths": _PATHS, "select": _CODES, "ignore": _CODES, "options": _OPTIONS,
          "views": {"type": "boolean", "description": "false: leave out each trace's operator, kernel, module and "
                    "range tables and its timeline (most of a real report's size; the export tool writes the tables "
                    "as files)."},
          "timeline": {"type": "boolean", "description": "true: keep each trace's timeline (the lanes the --html "
                       "page draws), as `gpuprof analyze --timeline` does; left out by default."}},
         ("paths",), _analyze),
    Tool("diff", "Compare two runs",
         "What `gpuprof diff BEFORE AFTER --format json` prints: step time and its parts before and after, the "
         "operators and kernels that changed, findings fixed and new; with fail_on_regression, the verdict.",
         {"before": {**_STR, "description": "A trace, run folder or saved report.json."},
          "after": {**_STR, "description": "The same, after the change."},
          "metric": {**_STR, "description": "The metric fail_on_regression judges (default step_time)."},
          "fail_on_regression": {**_STR, "description": "A threshold such as 5% (docs/diff.md)."}},
         ("before", "after"), _diff),
    Tool("memory", "Where the GPU memory went",
         "What `gpuprof memory FILE --format json` prints for a CUDA memory snapshot pickle or a trace recorded "
         "with profile_memory=True: peaks, holders, fragmentation and the memory findings. With diff or after: "
         "`gpuprof memory diff FILE [AFTER]`, the allocation sites that grew (one trace alone: its first step "
         "against its last).",
         {"file": {**_STR, "description": "A snapshot .pickle or a trace."},
          "after": {**_STR, "description": "A later snapshot or trace to compare FILE with (a memory diff)."},
          "diff": {"type": "boolean", "description": "A memory diff (implied by after)."},
          "select": _CODES, "ignore": _CODES,
          "options": _OPTIONS, "device_memory": {**_STR, "description": "Device capacity, e.g. 80GiB."},
          "top": {"type": "integer", "minimum": 1, "maximum": 1000,
                  "description": "Rows in holder tables (10) or the growth table of a diff (15)."}},
         ("file",), _memory),
    Tool("history", "Runs over time",
         "What `gpuprof history LOGDIR --format json` prints: every run's step time, utilisation, data loading, "
         "memory peak and findings in time order, with change points and when each finding appeared.",
         {"logdir": {**_STR, "description": "A log folder (or URL prefix) holding runs' report.json."}},
         ("logdir",), _history),
    Tool("export", "Tables out",
         "`gpuprof export SOURCE --format FORMAT -o DIR`: the steps, operators, kernels, modules, ranges and "
         "findings tables, one file each, in a folder under the server's first root (output) or in a new "
         "temporary folder; answers the folder and each file's row count.",
         {"source": {**_STR, "description": "A trace, run folder or saved report.json."},
          "format": {**_STR, "enum": ["csv", "parquet", "arrow"], "description": "csv (default) needs nothing more."},
          "output": {**_STR, "description": "A folder under a root; omitted: a new temporary folder."}},
         ("source",), _export, read_only=False),
    Tool("explain", "Explain a finding code",
         "What `gpuprof explain CODE` prints: what the code detects, why it matters, its options and examples.",
         {"code": {**_STR, "description": "A code (GP203) or a name (host-sync)."}}, ("code",), _explain),
    Tool("rules", "List every finding code", "What `gpuprof rules` lists: every code, name, severity and title.",
         {}, (), _rules),
)
TOOL_NAMES = tuple(t.name for t in TOOLS)


@dataclass(frozen=True)
class Toolbox:
    """The tools over one set of roots (gpuprof.mcp.wire.Tools)."""

    roots: Roots

    def describe(self) -> list[JsonObj]:
        return [t.describe(bool(self.roots.urls)) for t in TOOLS]

    def instructions(self) -> str:
        return ("gpuprof diagnoses PyTorch profiler traces and CUDA memory snapshots offline. This server reads only "
                "under: " + ", ".join(self.roots.shown()) + ". Relative names are taken under the first folder where "
                "they exist. Start with analyze on a run folder; explain names what a finding code means.")

    def call(self, name: str, arguments: JsonObj, structured: bool, progress: ProgressSink | None = None) -> JsonObj:
        tool = next((t for t in TOOLS if t.name == name), None)
        if tool is None:
            raise ProtocolError(INVALID_PARAMS, f"unknown tool: {name[:100]} (tools: {', '.join(TOOL_NAMES)})")
        try:
            summary, doc = tool.run(self, tool.check(arguments), progress)
        except UsageError as err:  # a bad option value, as the command line says it
            return _failed(f"gpuprof: error: {visible(scrub(str(err)))}")
        except GpuprofError as err:
            _debug(err)
            return _failed(f"gpuprof: error: {visible(scrub(str(err)))}")
        except MemoryError:
            return _failed("gpuprof: error: out of memory while analysing the input")
        except Exception as err:  # noqa: BLE001 - one line, the server reads on (the command line's exit 3)
            _debug(err)
            return _failed(f"gpuprof: internal error: {type(err).__name__}: {visible(scrub(str(err)))} "
                           "(a gpuprof bug; rerun with GPUPROF_DEBUG=1 for the traceback)")
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False)  # compact: it goes into a model's context
        result: JsonObj = {"content": [{"type": "text", "text": summary}, {"type": "text", "text": text}],
                           "isError": False}
        if structured:
            result["structuredContent"] = doc
        return result


def _debug(err: BaseException) -> None:
    """Under GPUPROF_DEBUG=1, as the command line does: the traceback (and each failed rule's) on standard error."""
    import os

    if not os.environ.get("GPUPROF_DEBUG"):
        return
    import sys
    import traceback

    from gpuprof.errors import RuleError

    causes = [cause for _, cause in err.failures] if isinstance(err, RuleError) else [err]
    for cause in causes:
        sys.stderr.write(scrub("".join(traceback.format_exception(cause))))


def _failed(line: str) -> JsonObj:
    return {"content": [{"type": "text", "text": " ".join(line.split())}], "isError": True}
