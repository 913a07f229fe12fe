"""Reading a saved JSON report (``gpuprof analyze --format json -o report.json``) back.

``gpuprof analyze report.json`` re-renders it and ``gpuprof diff`` compares
it, without the traces. The file is checked before it is trusted: a regular
file (a FIFO or device is refused without being opened for reading, so
nothing blocks), at most ``MAX_REPORT_BYTES``, JSON, an object whose
``schema_version`` is ``1.x`` (the compatibility policy of
docs/report-schema.md: a newer minor version only adds fields, which are
ignored), whose every value has the type and range the schema gives it
(:mod:`gpuprof.saved.types`, :mod:`gpuprof.saved.check`: no NaN, no negative
duration, no share over 1). Anything else is an
:class:`~gpuprof.errors.InputError` naming the file and, for a value, its
field (exit 2). :func:`read_saved` gives the typed :class:`SavedReport` that
history, diff, export, the trackers and the TensorBoard tab compute from;
:func:`read_report` the live :class:`~gpuprof.report.Report` built from it (re-rendered, and written back
unchanged, by ``gpuprof analyze report.json``).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from typing import Any, Callable

import msgspec

from gpuprof.errors import InputError
from gpuprof.findings import Finding
from gpuprof.report import SCHEMA_VERSION, Report, TraceSummary
from gpuprof.saved.check import ReportProblem, problem_of, saved_report
from gpuprof.saved.types import SavedFinding, SavedReport

__all__ = ["read_saved", "read_report", "loaded", "checked", "live_report", "live_findings",
           "SavedSection", "MAX_REPORT_BYTES", "is_saved_report", "unshown_sections"]

MAX_REPORT_BYTES = 256 << 20  # a report is kB to a few MB; more is not one gpuprof wrote
_MAJOR = SCHEMA_VERSION.split(".")[0]


def is_saved_report(path: str | os.PathLike[str]) -> bool:
    """A JSON report gpuprof wrote (``.json``, ``schema_version`` near the start), not a trace."""
    from gpuprof.inputs import is_report_file

    return is_report_file(path)


def read_saved(path: str | os.PathLike[str]) -> SavedReport:
    """The report, checked and typed (module docstring)."""
    return _read(path)[1]


def _read(path: str | os.PathLike[str]) -> tuple[dict[str, Any], SavedReport]:
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as err:
        raise InputError.from_os_error(p, err) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(p, "not a regular file (a saved report must be a file)")
    if st.st_size > MAX_REPORT_BYTES:
        raise InputError(p, f"report larger than {MAX_REPORT_BYTES >> 20} MiB; not one gpuprof wrote")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_REPORT_BYTES + 1)
    except OSError as err:
        raise InputError.from_os_error(p, err, "read") from None
    return loaded(raw, p)


def loaded(raw: bytes, name: str, limit: int | None = None) -> tuple[dict[str, Any], SavedReport]:
    """A saved report's bytes as its checked JSON object and its :class:`SavedReport` (InputError naming ``name``);
    ``limit``: the most bytes a report may have (:data:`MAX_REPORT_BYTES` unless given)."""
    limit = MAX_REPORT_BYTES if limit is None else limit
    if len(raw) > limit:
        raise InputError(name, f"report larger than {limit >> 20} MiB; not one gpuprof wrote")
    p = name
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise InputError(p, f"not a valid JSON report ({type(err).__name__}: {err})") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise InputError(p, "a JSON file without schema_version: not a gpuprof report")
    version = doc["schema_version"]
    if not isinstance(version, str) or version.split(".")[0] != _MAJOR or len(version.split(".")) != 2:
        raise InputError(p, f"report schema_version {repr(version)[:40]} is not one this gpuprof reads "
                            f"({_MAJOR}.x; this gpuprof writes {SCHEMA_VERSION})")
    for key in ("traces", "findings", "sections", "notes", "inputs"):
        if not isinstance(doc.get(key, []), list):
            raise InputError(p, f"malformed report: {key!r} is not a list")
    return doc, checked(doc, p)


def checked(doc: Any, name: str) -> SavedReport:
    """A report's parsed JSON (read back, or an analysis's ``to_dict``) as its :class:`SavedReport`, every typed
    value in its range before a figure is computed from it (an InputError naming ``name`` and the field)."""
    try:
        return saved_report(doc)
    except ReportProblem as err:
        raise InputError(name, f"malformed report: {err.field} {err.problem}") from None


@dataclass
class SavedSection:
    """A section read back from a report: its kind and fields, as written."""

    kind: str
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data


def read_report(path: str | os.PathLike[str]) -> Report:
    """The report as the live :class:`Report` (re-rendered by ``gpuprof analyze report.json``): the file read,
    checked and typed once (:func:`read_saved`), then :func:`live_report`."""
    p = os.fspath(path)
    return live_report(read_saved(p), p)


def live_report(saved: SavedReport, name: str) -> Report:
    """The :class:`Report` the checked ``saved`` describes, built from its typed values (no second reading of the
    JSON); an InputError naming ``name`` and the field where a value the live types require is absent. Every
    field is carried over (``failed_ranks`` too: drawn again, a report still says which ranks' traces failed)."""
    return Report(command=saved.command, inputs=list(saved.inputs),
                  traces=_live(saved.traces, list[TraceSummary], "traces", name),
                  sections=[SavedSection(str(s["kind"]), {k: v for k, v in s.items() if k != "kind"})
                            for s in saved.sections],
                  findings=live_findings(saved.findings, name), notes=list(saved.notes),
                  failed_rules=list(saved.failed_rules), failed_ranks=list(saved.failed_ranks), job=saved.job)


def live_findings(findings: list[SavedFinding], name: str,
                  keep: Callable[[SavedFinding], bool] | None = None) -> list[Finding]:
    """The saved findings (those ``keep`` keeps) as :class:`Finding`; an InputError naming ``name`` and the finding
    (``findings[3].name is missing``) where one lacks a field the live type requires."""
    return [_live(f, Finding, f"findings[{i}]", name) for i, f in enumerate(findings) if keep is None or keep(f)]


def _live(value: Any, type_: Any, root: str, name: str) -> Any:
    """``value`` (saved types, checked) as the live ``type_``: what a saved type leaves UNSET is absent there."""
    plain = msgspec.to_builtins(value)
    try:
        return msgspec.convert(plain, type_)
    except msgspec.ValidationError as err:
        problem = problem_of(err, plain, root, type_)
        raise InputError(name, f"malformed report: {problem.field} {problem.problem}") from None


def unshown_sections(sections: list[Any]) -> list[Any]:
    """Saved sections relabelled so the terminal and markdown renderers name them instead of drawing them.

    A section's renderer draws the object its module made (a memory analysis,
    a cross-rank merge); a saved report holds only that object's JSON, which
    ``--format json`` writes back unchanged.
    """
    return [SavedSection(f"{s.kind} (saved)", s.data) if isinstance(s, SavedSection) else s
            for s in sections]
