"""Findings: what gpuprof has to say, as data.

A :class:`Finding` is produced by a rule (trace analysis), by a runtime check
(capture) or by the memory analysis. It carries numbers, not prose: every
renderer (terminal, JSON, markdown, TensorBoard, the annotated trace) turns
the same fields into text. The ``message`` is the one-line summary with the
numbers already in it; everything else is structured.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["Severity", "SourceLocation", "EventRef", "Evidence", "Finding", "Link", "sort_findings", "code_matches"]


class Severity(str, enum.Enum):
    """How much a finding matters. Ordered: info < warning < error."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]

    @classmethod
    def parse(cls, value: "str | Severity") -> "Severity":
        if isinstance(value, Severity):
            return value
        try:
            return cls(value.lower())
        except ValueError:
            raise ValueError(f"unknown severity {value!r} (use info, warning or error)") from None


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


@dataclass(frozen=True)
class SourceLocation:
    """A place in the user's source code (``file:line`` plus the function name when known)."""

    file: str
    line: int | None = None
    function: str | None = None

    def __str__(self) -> str:
        text = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{text} ({self.function})" if self.function else text

    def to_dict(self) -> dict[str, Any]:
        return _builtins(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SourceLocation":
        return cls(file=d["file"], line=d.get("line"), function=d.get("function"))


@dataclass(frozen=True)
class EventRef:
    """One trace event behind a finding: where it is in the trace (µs, as in the file)."""

    name: str
    ts: float
    dur: float = 0.0
    pid: int | str | None = None
    tid: int | str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _builtins(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EventRef":
        return cls(name=d["name"], ts=d["ts"], dur=d.get("dur", 0.0), pid=d.get("pid"), tid=d.get("tid"))


@dataclass(frozen=True)
class Evidence:
    """The measurement a finding rests on: ``metric`` = ``value`` compared with ``threshold``.

    ``events`` points at (a bounded sample of) the trace events behind the value,
    so a viewer can jump to them; ``extra`` holds further named numbers.
    """

    metric: str
    value: float | int | str | None
    threshold: float | int | None = None
    unit: str = ""
    events: tuple[EventRef, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _builtins(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Evidence":
        return cls(
            metric=d["metric"],
            value=d.get("value"),
            threshold=d.get("threshold"),
            unit=d.get("unit", ""),
            events=tuple(EventRef.from_dict(e) for e in d.get("events", ())),
            extra=dict(d.get("extra", {})),
        )


LINK_KINDS = ("supersedes", "explained_by", "cost_counted_in")


@dataclass(frozen=True)
class Link:
    """A link from a finding to another finding of the same report, by code (drawn by every renderer).

    * ``supersedes``: this finding absorbed the findings of ``code`` (the
      overlap policy, :func:`gpuprof.codes.apply_overlaps`; the absorbed
      ones' first message is in the evidence ``supersedes``); ``count`` of them.
    * ``explained_by``: the part ``part`` of this finding (a GP101 idle part,
      by its label) is explained by the finding(s) of ``code``.
    * ``cost_counted_in``: part of this finding's time is counted in the cost
      of ``code``; its own cost is what is left, so costs add up.
    """

    kind: str
    code: str
    part: str | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise ValueError(f"unknown link kind {self.kind!r} (one of {', '.join(LINK_KINDS)})")

    def to_dict(self) -> dict[str, Any]:
        return _builtins(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Link":
        return cls(kind=d["kind"], code=d["code"], part=d.get("part"), count=d.get("count"))


@dataclass(frozen=True)
class Finding:
    """One diagnosis.

    ``cost_us_per_step`` is the estimated time the problem costs per training
    step, in microseconds (``None`` when it cannot be estimated, e.g. memory
    findings); ``cost_share`` is the same as a fraction of the mean step time
    (total step time / number of steps). A trace rule's message ends with the
    cost, labelled (``cost: GPU idle while loading data, 59.3 ms per step
    (33.4% of the mean step)``); where two findings describe the same time,
    one owns the cost and the other names it in an evidence
    ``cost_counted_in`` (its own cost is what is left), so costs can be
    summed without counting anything twice. Severity follows cost: a trace
    finding whose cost is under its rule's ``info_below_share`` of the step
    is ``info`` (see ``gpuprof.rules.base``).
    ``origin`` says which part of gpuprof produced it: ``trace``, ``runtime``
    or ``memory``; ``source`` names the input (a trace file, a snapshot).
    ``links`` tie it to other findings of the report (:class:`Link`), set
    where a report's findings are finished (:func:`gpuprof.flow.finish`).
    """

    code: str
    name: str
    severity: Severity
    message: str
    advice: str
    evidence: tuple[Evidence, ...] = ()
    cost_us_per_step: float | None = None
    cost_share: float | None = None
    location: SourceLocation | None = None
    origin: str = "trace"
    source: str | None = None
    links: tuple[Link, ...] = ()
    # the what-if replay (docs/critical-path.md): the step time saved per step with the cause removed on the
    # step graph (None: not replayed), and a short note when it and the rule's cost disagree or it cannot be replayed
    what_if_saving_us: float | None = None
    what_if_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _builtins(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Finding":
        loc = d.get("location")
        return cls(
            code=d["code"],
            name=d["name"],
            severity=Severity.parse(d["severity"]),
            message=d["message"],
            advice=d.get("advice", ""),
            evidence=tuple(Evidence.from_dict(e) for e in d.get("evidence", ())),
            cost_us_per_step=d.get("cost_us_per_step"),
            cost_share=d.get("cost_share"),
            location=SourceLocation.from_dict(loc) if loc else None,
            origin=d.get("origin", "trace"),
            source=d.get("source"),
            links=tuple(Link.from_dict(x) for x in d.get("links", ())),
            what_if_saving_us=d.get("what_if_saving_us"),
            what_if_note=d.get("what_if_note"),
        )


def _builtins(obj: Any) -> dict[str, Any]:
    """The JSON form of a finding record (docs/report-schema.md).

    msgspec writes a dataclass field by field, in declaration order, with
    every field (None included); nested records become objects, tuples lists
    and ``Severity`` its value. So the schema is the field list of each class:
    renaming, reordering or adding a field changes the report.
    """
    import msgspec  # here: `import gpuprof` and `gpuprof --help` read findings.Severity without msgspec

    return msgspec.to_builtins(obj)  # type: ignore[no-any-return]


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Most expensive first; findings without a cost estimate after, by severity then code."""

    def key(f: Finding) -> tuple[int, float, int, str]:
        has_cost = f.cost_us_per_step is not None
        return (0 if has_cost else 1, -(f.cost_us_per_step or 0.0), -f.severity.rank, f.code)

    return sorted(findings, key=key)


def code_matches(code: str, patterns: Iterable[str]) -> bool:
    """True when ``code`` equals or starts with one of ``patterns`` (``GP1`` selects GP1xx)."""
    code = code.upper()
    return any(code.startswith(p.strip().upper()) for p in patterns if p.strip())
