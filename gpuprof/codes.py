"""Every finding code gpuprof can report, in one catalogue: ``gpuprof rules`` and ``gpuprof explain``.

Codes come from three places, which produce findings differently:

- trace rules (GP1xx-GP4xx), registered classes in :mod:`gpuprof.rules`,
  reported by ``gpuprof analyze`` and by capture's end-of-run analysis;
- memory findings (GP5xx), reported by ``gpuprof memory``
  (:data:`gpuprof.memory.analysis.CODES`);
- cross-rank rules (GP70x), registered in :mod:`gpuprof.distributed.rules`,
  reported by ``gpuprof analyze`` when it sees two or more ranks of a job;
- runtime checks (GP6xx), made while a capture runs
  (:data:`gpuprof.capture.codes.RUNTIME_CHECKS`, no torch needed to list them).

This module puts them behind one lookup, so that every code a report prints
can be listed and explained. It imports neither torch nor the analysis
machinery beyond the rule registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Code", "catalogue", "lookup", "explain_text"]


@dataclass(frozen=True)
class Code:
    """One finding code as the catalogue shows it."""

    code: str
    name: str
    severity: str  # the default severity, or e.g. "warning or info" where it depends on the numbers
    title: str
    reported_by: str  # "gpuprof analyze", "gpuprof memory" or "capture"
    doc: str  # the long explanation, plain text


def catalogue() -> list[Code]:
    """All codes, sorted by code."""
    return sorted(_trace_rules() + _cross_rank_rules() + _memory_codes() + _runtime_checks(), key=lambda c: c.code)


def lookup(code_or_name: str) -> list[Code]:
    """The codes that ``code_or_name`` names: one for a code; one or more for a name (names may repeat)."""
    key = code_or_name.strip()
    by_code = [c for c in catalogue() if c.code.upper() == key.upper()]
    if by_code:
        return by_code
    return [c for c in catalogue() if c.name == key.lower()]


def explain_text(code: Code) -> str:
    """The full explanation of one code (trace rules: with options and examples)."""
    from gpuprof.distributed.rules import get_cross_rank_rule
    from gpuprof.rules.base import get_rule

    rule: Any = None
    if code.reported_by == "gpuprof analyze":
        rule = get_rule(code.code)
    elif code.reported_by == CROSS_RANK:
        rule = get_cross_rank_rule(code.code)
    if rule is not None:
        parts = [f"{rule.code} {rule.name} ({rule.severity.value})", rule.title, "", rule.doc()]
        parts += ["", "Options (--option CODE.NAME=VALUE):"]
        parts += [f"  {o.name} = {o.default!r}: {o.help}" for o in rule.all_options()]
        parts += ["", "Triggers it:", _indent(rule.bad_example), "", "Does not:", _indent(rule.good_example)]
        return "\n".join(parts)
    return "\n".join([f"{code.code} {code.name} ({code.severity})", code.title, "",
                      f"Reported by: {code.reported_by}.", "", code.doc])


# ---------------------------------------------------------------------------- sources


def _trace_rules() -> list[Code]:
    from gpuprof.rules.base import all_rules

    return [Code(r.code, r.name, r.severity.value, r.title, "gpuprof analyze", r.doc()) for r in all_rules()]


CROSS_RANK = "gpuprof analyze (two or more ranks of a job)"


def _cross_rank_rules() -> list[Code]:
    from gpuprof.distributed.rules import all_cross_rank_rules

    return [Code(r.code, r.name, r.severity.value, r.title, CROSS_RANK, r.doc()) for r in all_cross_rank_rules()]


# default severity of each memory code where it is not one fixed value (see docs/memory.md)
_MEMORY_SEVERITY = {
    "GP510": "warning", "GP511": "warning or info", "GP512": "error", "GP513": "warning or info",
    "GP514": "info", "GP515": "info", "GP520": "warning", "GP521": "warning",
}


def _memory_codes() -> list[Code]:
    from gpuprof.memory.analysis import CODES

    docs = _doc_rows("memory.md")
    out = []
    for code, (name, title) in CODES.items():
        doc = docs.get(code) or _docs_missing("memory.md", "Finding codes")
        out.append(Code(code, name, _MEMORY_SEVERITY.get(code, "warning"), title, "gpuprof memory", doc))
    return out


def _runtime_checks() -> list[Code]:
    from gpuprof.capture.codes import RUNTIME_CHECKS

    docs = _doc_sections("capture.md")
    return [Code(c.code, c.name, c.severity.value, c.title, "capture (a runtime check while the loop runs)",
                 docs.get(c.code) or _docs_missing("capture.md", "Runtime checks (GP6xx)"))
            for c in RUNTIME_CHECKS]


# The long forms of GP5xx/GP6xx live in docs/ (one place, read by people and by this module).
# A source checkout (how the README installs gpuprof) has them beside the package.
_DOCS = Path(__file__).resolve().parent.parent / "docs"


def _docs_missing(page: str, section: str) -> str:
    return f"See docs/{page}, section {section!r}, in gpuprof's source (not found beside this installation)."


def _read_doc(page: str) -> str:
    try:
        return (_DOCS / page).read_text(encoding="utf-8")
    except OSError:
        return ""


def _doc_sections(page: str) -> dict[str, str]:
    """``### GPxxx name`` sections of a docs page: code -> the section's text."""
    out: dict[str, str] = {}
    for m in re.finditer(r"^### (GP\d{3})\b[^\n]*\n(.*?)(?=^#{1,3} |\Z)", _read_doc(page), re.S | re.M):
        out[m.group(1)] = m.group(2).strip()
    return out


def _doc_rows(page: str) -> dict[str, str]:
    """Rows of the code table of a docs page (``| GPxxx | name | severity | when | numbers |``)."""
    out: dict[str, str] = {}
    for line in _read_doc(page).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"GP\d{3}", cells[0]):
            if len(cells) >= 5:
                head = f"Severity: {cells[2]}.\nWhen: {cells[3]}"
            else:  # severity and "when" share one cell where the severity depends on the case
                head = f"Severity, and when: {cells[2]}"
            out[cells[0]] = f"{head}\nKey numbers (evidence): {cells[-1]}"
    return out


def _indent(code: str) -> str:
    import textwrap

    return textwrap.indent(textwrap.dedent(code).strip("\n"), "    ")
