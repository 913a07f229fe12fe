"""The rule framework: one small, self-documenting unit per diagnosis.

A rule is a subclass of :class:`Rule` registered with :func:`register`. It
has a stable ``code`` (``GP101``), a slug ``name``, a default severity, a
docstring that explains what it detects and why it matters, a ``bad_example``
and a ``good_example`` (user code, shown by ``gpuprof explain``), and its
thresholds as :class:`Option` objects, overridable from the command line
(``--option GP101.min_utilization=0.6``). ``check`` reads the trace and its
metrics and yields findings; it never prints.

**Costs and severity.** A finding's cost is the time per step the problem
costs; its message ends with it, labelled (see :meth:`Rule.finding`). Where
two rules describe the same time, one owns the cost and the other names it
in an evidence ``cost_counted_in`` (GP201 owns the pageable copies GP202
also reports). Severity follows cost by one policy
(:func:`gpuprof.codespec.severity_for_cost`, applied by the one runner
:func:`gpuprof.flow.run_rules`): a finding whose cost is under the rule's
``info_below_share`` of the mean step time (default 1%, an option of every
rule, e.g. ``--option GP202.info_below_share=0.05``) is ``info``, one at or
above it at least ``warning``, whatever the rule chose. Findings without a
cost keep theirs.
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from typing import Any, ClassVar, Iterable, Iterator, Mapping, TypeVar

from gpuprof.codespec import INFO_BELOW_SHARE, CodeSpec, Option
from gpuprof.findings import EventRef, Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.cause import CauseFigure
from gpuprof.rules.whatif import WhatIf
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event, Trace

__all__ = ["Rule", "RuleSpec", "RuleContext", "register", "all_rules", "get_rule", "add_rule", "find_rule",
           "event_refs", "COMMON_OPTIONS"]

MAX_EVENT_REFS = 20  # evidence keeps a bounded sample of events


class RuleContext:
    """What a rule sees: the trace, its metrics and the rule's option values.

    ``others`` maps the code of every *other* rule that runs in the same
    analysis (after ``--select``/``--ignore``) to its option values. A rule
    whose findings overlap another's uses it to leave a shared cost to the
    rule that owns it (see :meth:`runs`), so costs are never counted twice;
    without it (a context built by hand) no other rule is assumed to run.
    """

    def __init__(self, trace: Trace, metrics: TraceMetrics, options: Mapping[str, Any],
                 others: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.trace = trace
        self.metrics = metrics
        self._options = dict(options)
        self._others = {k: dict(v) for k, v in (others or {}).items()}

    def opt(self, name: str) -> Any:
        return self._options[name]

    def runs(self, code: str) -> Mapping[str, Any] | None:
        """The option values of rule ``code`` when it runs in this analysis, else None."""
        return self._others.get(code)


class RuleSpec:
    """What every rule class declares, whatever it reads: code, name, examples, options, docs.

    :class:`Rule` (one trace) and the cross-rank rules
    (``gpuprof.distributed.rules.CrossRankRule``, several ranks) derive from it,
    so both become registry entries (:meth:`spec`) the same way.
    """

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.WARNING
    options: ClassVar[tuple[Option, ...]] = ()
    bad_example: ClassVar[str] = ""
    good_example: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()  # former names, still accepted by explain and --select
    superseded_by: ClassVar[tuple[str, ...]] = ()  # codes that report the same problem better (docs/codes.md)
    origin: ClassVar[str] = "trace"
    # under this share of the step a finding with a cost is info (the default of its info_below_share option)
    info_below_share: ClassVar[float] = INFO_BELOW_SHARE

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def spec(cls) -> CodeSpec:
        """The rule as a registry entry (:class:`gpuprof.codespec.CodeSpec`), derived from the class."""
        return CodeSpec(cls.code, cls.name, cls.severity, cls.title, cls.origin, options=cls.all_options(),
                        bad_example=cls.bad_example, good_example=cls.good_example, doc=cls.doc(),
                        aliases=cls.aliases, superseded_by=cls.superseded_by, module=cls.__module__)

    @classmethod
    def all_options(cls) -> tuple[Option, ...]:
        """The rule's own options, then the ones every rule has (``info_below_share``, with the rule's default)."""
        return cls.options + tuple(dataclasses.replace(o, default=cls.info_below_share)
                                   if o.name == "info_below_share" else o for o in COMMON_OPTIONS)

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {o.name: o.default for o in cls.all_options()}

    @classmethod
    def validate(cls) -> None:
        """Raise ValueError unless the class is complete enough to register (code, name, docs, both examples)."""
        if not cls.code or not cls.name:
            raise ValueError(f"rule {cls.__name__} needs a code and a name")
        if not cls.__doc__ or not cls.bad_example or not cls.good_example:
            raise ValueError(f"rule {cls.code} needs a docstring, a bad_example and a good_example")


class Rule(RuleSpec):
    """Base class of all trace rules. See the module docstring."""

    # the figure that is the rule's cause, per step (gpuprof.rules.cause): `gpuprof diff` calls a gone finding
    # fixed only when it improved beyond its own per-step spread; None: the rule declares none
    cause: ClassVar[CauseFigure | None] = None
    # what removing the rule's cause means on the step graph (gpuprof.rules.whatif), replayed for each finding's
    # what-if (docs/critical-path.md); None: its cause is not a node of the graph (the finding says so)
    what_if: ClassVar[WhatIf | None] = None

    def check(self, ctx: RuleContext) -> Iterable[Finding]:  # pragma: no cover - abstract
        raise NotImplementedError

    def finding(self, ctx: RuleContext, message: str, advice: str, *, evidence: Iterable[Evidence] = (),
                cost_us_per_step: float | None = None, location: SourceLocation | None = None,
                severity: Severity | None = None, cost_label: str | None = None) -> Finding:
        """Build a Finding with this rule's code and the cost share of the mean step.

        With a cost, ``cost_label`` says what the cost is (``"GPU idle while
        loading data"``) and the message ends with ``cost: LABEL, T per step
        (S of the mean step)``: the same figure and share the Cost field
        shows, so message and cost never disagree silently. The share's
        denominator is the mean step time (total step time / steps: the one
        denominator, gpuprof.flow); a cost above the step is capped at it (the
        measured figure stays as the evidence ``cost_measured_us_per_step``).
        """
        step = ctx.metrics.mean_step_time
        evidence = tuple(evidence)
        if cost_us_per_step is not None and step > 0 and cost_us_per_step > step:
            # a cost per step cannot exceed the step it is a share of: the measured figure stays, labelled
            evidence += (Evidence("cost_measured_us_per_step", round(cost_us_per_step, 1), round(step, 1), "us",
                                  extra={"capped_at": "the mean step"}),)
            cost_us_per_step = step
        share = (cost_us_per_step / step) if (cost_us_per_step is not None and step > 0) else None
        if cost_us_per_step is not None:
            if not cost_label:
                raise ValueError(f"rule {self.code}: a finding with a cost needs a cost_label")
            from gpuprof.rules.common import of_step

            message = f"{message}; cost: {cost_label}, {of_step(ctx.metrics, cost_us_per_step)}"
        return Finding(
            code=self.code,
            name=self.name,
            severity=severity or self.severity,
            message=message,
            advice=textwrap.dedent(advice).strip(),
            evidence=evidence,
            cost_us_per_step=cost_us_per_step,
            cost_share=share,
            location=location,
            origin="trace",
            source=ctx.trace.path,
        )


COMMON_OPTIONS: tuple[Option, ...] = (
    Option(
        "info_below_share",
        INFO_BELOW_SHARE,
        "a finding whose cost is under this share of the mean step time is info, at or above it at least "
        "a warning (severity follows cost)",
    ),
)


_REGISTRY: dict[str, type[Rule]] = {}


S = TypeVar("S", bound=RuleSpec)


def add_rule(registry: dict[str, type[S]], cls: type[S]) -> type[S]:
    """Validate ``cls`` and add it to ``registry`` under its code (codes are unique); for every registry."""
    cls.validate()
    if cls.code in registry and registry[cls.code] is not cls:
        raise ValueError(f"duplicate rule code {cls.code}")
    registry[cls.code] = cls
    return cls


def find_rule(rules: Iterable[type[S]], code_or_name: str) -> type[S] | None:
    """The rule with that code (any case) or name, else the one with that former name (alias)."""
    key = code_or_name.strip()
    rules = list(rules)
    for r in rules:
        if r.code.upper() == key.upper() or r.name == key.lower():
            return r
    return next((r for r in rules if key.lower() in r.aliases), None)


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: add a rule to the registry (codes are unique)."""
    return add_rule(_REGISTRY, cls)


def all_rules() -> list[type[Rule]]:
    import gpuprof.rules  # noqa: F401 - importing the package registers every rule

    return [_REGISTRY[c] for c in sorted(_REGISTRY)]


def get_rule(code_or_name: str) -> type[Rule] | None:
    return find_rule(all_rules(), code_or_name)


def event_refs(events: Iterable[Event], limit: int = MAX_EVENT_REFS) -> tuple[EventRef, ...]:
    """A bounded sample of trace events, as references a viewer can jump to."""
    out = []
    it: Iterator[Event] = iter(events)
    for ev in it:
        out.append(EventRef(name=ev.name, ts=ev.ts, dur=ev.dur, pid=ev.pid, tid=ev.tid))
        if len(out) >= limit:
            break
    return tuple(out)
