"""The one shape every finding code is declared in: :class:`CodeSpec` with its :class:`Option` thresholds.

A trace rule derives its spec from its class attributes
(:meth:`gpuprof.rules.base.Rule.spec`); a memory code is a ``CodeSpec`` in
:mod:`gpuprof.memory.codes`; a runtime check is one :func:`runtime_spec`
call in :mod:`gpuprof.runtimecodes`. :mod:`gpuprof.codes` gathers them into
the registry that ``gpuprof rules``/``gpuprof explain``, ``--option`` and the
overlap policy read. This module imports nothing heavy (no torch, no numpy).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, TypeVar

from gpuprof.findings import Finding, Severity

__all__ = ["Option", "CodeSpec", "ORIGINS", "option_default", "severity_for_cost", "INFO_BELOW_SHARE"]

INFO_BELOW_SHARE = 0.01  # default of every rule's info_below_share option

_D = TypeVar("_D")

# origin -> what reports the codes of that origin (shown by `gpuprof rules`/`explain`)
ORIGINS: dict[str, str] = {
    "trace": "gpuprof analyze (and capture's end-of-run analysis)",
    "memory": "gpuprof memory",
    "runtime": "capture (a runtime check while the loop runs)",
    "distributed": "gpuprof analyze of several ranks (and capture with torchrun)",
}


@dataclass(frozen=True)
class Option:
    """A threshold of a code: its name, default and meaning.

    ``unit="bytes"`` lets a value be written as a size (``64MiB``); any other
    unit is informative only. The value's type is the default's type.
    """

    name: str
    default: float | int | bool | str
    help: str
    unit: str = ""

    def parse(self, text: str) -> Any:
        """The value of ``text`` (ValueError with a one-line reason when it is not one)."""
        kind = type(self.default)
        if kind is bool:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"expected true/false, got {text!r}")
        if self.unit == "bytes":
            from gpuprof.units import parse_bytes

            return self._in_range(parse_bytes(text))
        try:
            return self._in_range(kind(text))
        except ValueError as err:
            if "finite" in str(err):
                raise
            raise ValueError(f"expected {'a number' if kind in (int, float) else kind.__name__}, got {text!r}") from None

    def _in_range(self, value: Any) -> Any:
        """A number as every threshold is: finite and not negative (``nan`` would turn a rule off unsaid:
        no comparison with it is true; ``-5`` as a minimum share makes one that can never fire)."""
        import math

        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (
                math.isfinite(value) and value >= 0):
            raise ValueError(f"expected a finite number of 0 or more, got {value!r}")
        return value

    def check(self, value: Any) -> Any:
        """``value`` given as a Python object (capture's ``options=`` mapping): parsed or type-checked."""
        if isinstance(value, str) and not isinstance(self.default, str):
            return self.parse(value)
        kind = type(self.default)
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return self._in_range(float(value))
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return self._in_range(value)
        raise ValueError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class CodeSpec:
    """Everything gpuprof knows about one finding code.

    * ``name``: a slug, unique in the whole registry; ``aliases`` are former
      names still accepted by ``explain`` and ``--select``/``--ignore``.
    * ``severity``: the default; ``severity_note`` says so when the numbers
      decide between two (``"warning or info"``).
    * ``origin``: the part of gpuprof that reports it (a key of :data:`ORIGINS`).
    * ``doc``: the long explanation; when empty it is read from the section of
      ``docs/<docs_page>`` that names the code (one place for people and tools).
    * ``options``: its thresholds, set with ``--option CODE.NAME=VALUE``
      (``analyze``, ``memory``) or ``options={"CODE.NAME": value}`` (capture).
    * ``superseded_by``: codes that report the same problem with better
      evidence; when a finding of one of them is in the same report, this
      code's finding is folded into it (see :func:`gpuprof.codes.apply_overlaps`).
    """

    code: str
    name: str
    severity: Severity
    title: str
    origin: str
    options: tuple[Option, ...] = ()
    bad_example: str = ""
    good_example: str = ""
    doc: str = ""
    docs_page: str = ""
    aliases: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    severity_note: str = ""
    module: str = ""  # the module that reports it

    def __post_init__(self) -> None:
        if self.origin not in ORIGINS:
            raise ValueError(f"code {self.code}: unknown origin {self.origin!r} (one of {', '.join(ORIGINS)})")

    @property
    def severity_text(self) -> str:
        return self.severity_note or self.severity.value

    @property
    def reported_by(self) -> str:
        return ORIGINS[self.origin]

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)


def option_default(specs: Any, name: str) -> Any:
    """The default of option ``name`` as declared by one of ``specs`` (dataclass defaults read it, once).

    Used by the option dataclasses of memory and capture (``MemoryOptions``,
    ``CheckOptions``) so a default is written in the spec only.
    """
    for spec in specs:
        opt = spec.option(name)
        if opt is not None:
            return opt.default
    raise KeyError(f"no code declares the option {name!r}")


def replace_fields(obj: _D, values: dict[str, Any]) -> _D:
    """``obj`` (a dataclass) with ``values`` set; only fields it has (other codes' options are not its)."""
    dc: Any = obj  # a dataclass instance; typing.TypeVar cannot say so without typeshed's private protocol
    names = {f.name for f in dataclasses.fields(dc)}
    new: _D = dataclasses.replace(dc, **{k: v for k, v in values.items() if k in names})
    return new


def severity_for_cost(finding: Finding, options: Mapping[str, Any]) -> Finding:
    """Severity follows cost: the one policy for every finding that has a cost (docs/codes.md).

    A finding whose ``cost_share`` (of the mean step) is under its code's
    ``info_below_share`` (default :data:`INFO_BELOW_SHARE`, 1%) is ``info``;
    one at or above it is at least ``warning`` (an ``error`` stays one),
    whatever severity the rule chose. A finding without a cost keeps the
    severity its rule gave it. Applied by the one rule runner
    (:func:`gpuprof.flow.run_rules`), so no rule decides it on its own.
    """
    if finding.cost_share is None:
        return finding
    limit = options.get("info_below_share", INFO_BELOW_SHARE)
    if finding.cost_share < limit:
        severity = Severity.INFO
    else:
        severity = finding.severity if finding.severity.rank >= Severity.WARNING.rank else Severity.WARNING
    return finding if severity is finding.severity else dataclasses.replace(finding, severity=severity)
