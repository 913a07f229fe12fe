"""The registry of every finding code gpuprof can report: one :class:`~gpuprof.codespec.CodeSpec` each.

Codes are declared where the code that reports them lives, all in one shape:

- trace rules (GP1xx-GP4xx, GP501, GP9xx; GP7xx/GP8xx trace rules alike):
  ``@register class X(Rule)`` in :mod:`gpuprof.rules`, whose spec is
  :meth:`Rule.spec() <gpuprof.rules.base.Rule.spec>`;
- memory findings (GP510-GP522): :data:`gpuprof.memory.codes.MEMORY_CODES`;
- runtime checks made while a capture runs (GP6xx, and GP8xx capture hooks):
  :data:`gpuprof.runtimecodes.RUNTIME_CHECKS`, one ``runtime_spec(...)`` each;
- cross-rank rules (GP70x), reported by ``gpuprof analyze`` when it sees two or
  more ranks of a job: ``@register class X(CrossRankRule)`` in
  :mod:`gpuprof.distributed.rules` (same spec shape, origin ``distributed``);
- any other origin: :func:`declare`.

Everything that needs to know the codes reads this registry: ``gpuprof
rules``/``gpuprof explain`` (:func:`catalogue`, :func:`lookup`,
:func:`explain_text`), ``--option CODE.NAME=VALUE`` and capture's
``options=`` mapping (:func:`parse_options`), ``--select``/``--ignore`` by
name (:func:`resolve_selectors`), and the overlap policy
(:func:`apply_overlaps`, written up in ``docs/codes.md``). It imports no
torch and no analysis machinery beyond the rule registry.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Iterable, Mapping

from gpuprof.codespec import ORIGINS, CodeSpec, Option
from gpuprof.findings import Evidence, Finding, Link

__all__ = ["CodeSpec", "Option", "catalogue", "declare", "lookup", "get_spec", "explain_text", "explain_parts",
           "parse_options", "parse_option_overrides", "resolve_selectors", "apply_overlaps", "check_registry"]

_DECLARED: dict[str, CodeSpec] = {}


def declare(spec: CodeSpec) -> CodeSpec:
    """Add a code of an origin that has no declaration list of its own (returns ``spec``)."""
    old = _DECLARED.get(spec.code)
    if old is not None and old != spec:
        raise ValueError(f"duplicate code {spec.code}")
    _DECLARED[spec.code] = spec
    return spec


def _specs() -> list[CodeSpec]:
    from gpuprof.distributed.rules import all_cross_rank_rules
    from gpuprof.memory.codes import MEMORY_CODES
    from gpuprof.rules.base import all_rules
    from gpuprof.runtimecodes import RUNTIME_CHECKS

    return ([r.spec() for r in all_rules()] + [r.spec() for r in all_cross_rank_rules()] + list(MEMORY_CODES)
            + list(RUNTIME_CHECKS) + list(_DECLARED.values()))


def check_registry(specs: Iterable[CodeSpec]) -> None:
    """Raise ValueError when codes or names repeat, or an alias or ``superseded_by`` names nothing sensible."""
    specs = list(specs)
    codes: dict[str, CodeSpec] = {}
    names: dict[str, str] = {}
    for s in specs:
        if not re.fullmatch(r"GP[1-9]\d\d", s.code):
            raise ValueError(f"code {s.code!r} is not GP followed by three digits")
        if s.code in codes:
            raise ValueError(f"code {s.code} is declared twice ({codes[s.code].module} and {s.module})")
        codes[s.code] = s
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", s.name):
            raise ValueError(f"{s.code}: name {s.name!r} is not a lower-case slug")
        if s.name in names:
            raise ValueError(f"name {s.name!r} belongs to {names[s.name]} and {s.code}; names are unique")
        names[s.name] = s.code
        opt_names = [o.name for o in s.options]
        if len(set(opt_names)) != len(opt_names):
            raise ValueError(f"{s.code}: an option name repeats in {opt_names}")
    for s in specs:
        for a in s.aliases:
            if a == s.name:
                raise ValueError(f"{s.code}: alias {a!r} is its own name")
        for other in s.superseded_by:
            if other not in codes or other == s.code:
                raise ValueError(f"{s.code}: superseded_by names {other!r}, not another known code")
            if s.code in codes[other].superseded_by:
                raise ValueError(f"{s.code} and {other} supersede each other")


def catalogue() -> list[CodeSpec]:
    """All codes, sorted by code, each with its long form (``doc``) filled in."""
    specs = _specs()
    check_registry(specs)
    return sorted((_with_doc(s) for s in specs), key=lambda c: c.code)


def get_spec(code: str) -> CodeSpec | None:
    """The spec of ``code`` (a code, not a name), or None."""
    key = code.strip().upper()
    return next((s for s in catalogue() if s.code == key), None)


def lookup(code_or_name: str) -> list[CodeSpec]:
    """The codes that ``code_or_name`` names: one for a code or a current name; an alias may name several."""
    key = code_or_name.strip()
    cat = catalogue()
    found = [c for c in cat if c.code == key.upper()] or [c for c in cat if c.name == key.lower()]
    return found or [c for c in cat if key.lower() in c.aliases]


def resolve_selectors(tokens: Iterable[str]) -> list[str]:
    """``--select``/``--ignore`` words as code prefixes: names and former names become their codes.

    A word that is a code prefix (``GP1``, ``gp203``) stays; a name or alias
    becomes every code that has it (a former name shared by two codes selects
    both, as it did). Anything else is a ValueError naming the word.
    """
    out: list[str] = []
    cat = None
    for tok in tokens:
        t = tok.strip()
        if not t:
            continue
        if re.fullmatch(r"(?i)gp\d{0,3}", t):
            out.append(t.upper())
            continue
        cat = cat or catalogue()
        codes = [c.code for c in cat if c.name == t.lower() or t.lower() in c.aliases]
        if not codes:
            raise ValueError(f"unknown code or name {t!r} (see `gpuprof rules`)")
        out.extend(codes)
    return out


# ---------------------------------------------------------------------------- options


def parse_options(items: Iterable[str] | Mapping[str, Any], *, origins: Iterable[str] | None = None,
                  where: str = "") -> dict[str, dict[str, Any]]:
    """Option settings -> ``{code: {option: value}}``, checked against the registry.

    ``items`` is either ``["GP510.capacity_threshold=0.8", ...]`` (the command
    line's ``--option``) or ``{"GP510.capacity_threshold": 0.8}`` (capture's
    ``options=``; a value may be a Python value or its text). CODE may be a
    name. ``origins`` limits the codes to those reported where the settings
    are used (``where`` names it in the error): an option of a code that
    cannot be reported there would silently do nothing, so it is an error.
    Raises ValueError with a one-line reason.
    """
    pairs: list[tuple[str, str, Any]] = []  # (the setting as written, CODE.NAME, value)
    if isinstance(items, Mapping):
        pairs = [(f"{k}={v!r}", str(k), v) for k, v in items.items()]
    else:
        for item in items:
            if "=" not in item:
                raise ValueError(f"option {item!r} must look like CODE.name=value")
            key, value = item.split("=", 1)
            pairs.append((item, key, value))
    allowed = set(origins) if origins is not None else set(ORIGINS)
    out: dict[str, dict[str, Any]] = {}
    for item, key, value in pairs:
        if "." not in key:
            raise ValueError(f"option {item!r} must look like CODE.name=value")
        code, opt_name = (p.strip() for p in key.split(".", 1))
        found = lookup(code)
        if len(found) != 1:
            what = "unknown code" if not found else "ambiguous name"
            raise ValueError(f"{what} {code!r} in option {item!r} (see `gpuprof rules`)")
        spec = found[0]
        if spec.origin not in allowed:
            raise ValueError(f"{spec.code} is reported by {spec.reported_by}, not by {where or 'this command'}; "
                             f"its option {opt_name!r} does not apply here")
        opt = spec.option(opt_name)
        if opt is None:
            names = ", ".join(o.name for o in spec.options) or "none"
            raise ValueError(f"{spec.code} has no option {opt_name!r} (options: {names})")
        try:
            parsed = opt.check(value)  # text is parsed, a Python value type-checked
        except ValueError as err:
            raise ValueError(f"bad value for {spec.code}.{opt.name}: {err}") from None
        out.setdefault(spec.code, {})[opt.name] = parsed
    return out


def parse_option_overrides(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``["GP101.min_utilization=0.6"]`` -> ``{"GP101": {"min_utilization": 0.6}}``: ``gpuprof analyze``'s options.

    Only codes ``gpuprof analyze`` reports (trace and cross-rank rules); a
    ValueError with a one-line reason otherwise (see :func:`parse_options`).
    """
    return parse_options(items, origins=("trace", "distributed"), where="gpuprof analyze")


# ---------------------------------------------------------------------------- overlap policy


def apply_overlaps(findings: Iterable[Finding], specs: Iterable[CodeSpec] | None = None) -> list[Finding]:
    """Fold each finding whose code is superseded by a code present in ``findings`` into that finding.

    The policy (docs/codes.md): two origins may see one problem (GP102 in the
    trace and GP601 at runtime). The code with the better evidence is
    declared in the other's ``superseded_by``. When both are in one report,
    the superseded findings are dropped and the first finding of the code
    that supersedes them gains an evidence ``supersedes`` naming the dropped
    code, how many findings it had and its first message, and a
    ``supersedes`` link (drawn by every renderer), so nothing is lost and
    nothing is counted twice. Findings keep their order otherwise. Run once
    per report, by :func:`gpuprof.flow.finish`.
    """
    findings = list(findings)
    by_code = {s.code: s for s in (specs if specs is not None else _specs())}
    present = {f.code for f in findings}
    # superseded code -> the code that absorbs it (the first of its superseded_by present)
    absorbed: dict[str, str] = {}
    for code in present:
        spec = by_code.get(code)
        winner = next((w for w in spec.superseded_by if w in present), None) if spec else None
        if winner is not None:
            absorbed[code] = winner
    if not absorbed:
        return findings
    dropped: dict[str, list[Finding]] = {}
    kept: list[Finding] = []
    for f in findings:
        if f.code in absorbed:
            dropped.setdefault(f.code, []).append(f)
        else:
            kept.append(f)
    for code, lost in sorted(dropped.items()):
        winner = absorbed[code]
        i = next(i for i, f in enumerate(kept) if f.code == winner)
        first = lost[0]
        ev = Evidence("supersedes", code, None, "", extra={
            "name": first.name, "findings": len(lost), "origin": first.origin, "message": first.message,
            "source": first.source})
        w = kept[i]  # a supersedes record made before (a report read back) is replaced, not repeated
        evidence = tuple(e for e in w.evidence if not (e.metric == "supersedes" and e.value == code)) + (ev,)
        links = tuple(k for k in w.links if not (k.kind == "supersedes" and k.code == code))
        kept[i] = _with_what_if_of(dataclasses.replace(w, evidence=evidence, links=links + (Link("supersedes", code,
                                                                                             count=len(lost)),)), lost)
    return kept


def _with_what_if_of(w: Finding, lost: list[Finding]) -> Finding:
    """``w`` with the what-if of the first finding it absorbed that has one, when it has none itself: one problem,
    seen twice, replayed once (GP601 measured at runtime absorbs GP102, which the trace replayed)."""
    from gpuprof.rules.loaderfix import loader_without_gpu
    from gpuprof.trace.critpath.margin import carry_note, step_of

    if w.what_if_saving_us is None and w.what_if_note is None:
        cpu = next((x for x in lost if x.what_if_saving_us is None and loader_without_gpu(x) is not None), None)
        if cpu is not None:  # a loader fix on a run without GPU work: modelled with the cores the run measured
            return loader_without_gpu(cpu, w) or w
    carried = next((x for x in lost if x.what_if_saving_us is not None), None)
    if w.what_if_saving_us is not None or carried is None or carried.what_if_saving_us is None:
        return w
    step = step_of(w) or step_of(carried)
    note = carry_note(w.cost_us_per_step, carried.what_if_saving_us, step, carried.what_if_note) if step \
        else carried.what_if_note
    return dataclasses.replace(w, what_if_saving_us=carried.what_if_saving_us, what_if_note=note)


# ---------------------------------------------------------------------------- explain


def explain_text(code: CodeSpec) -> str:
    """The full explanation of one code: what it finds, who reports it, options, overlaps, examples."""
    return "\n".join(text for _, text in explain_parts(code))


def explain_parts(code: CodeSpec) -> list[tuple[str, str]]:
    """:func:`explain_text` as (kind, text) parts, so a screen can fit each to its width:
    ``"line"`` (one line of prose), ``"doc"`` (the long form: paragraphs and ``-``/``*`` lists),
    ``"option"`` (``  CODE.NAME = default: help``), ``"code"`` (an indented example) and
    ``"blank"``."""
    c = code if code.doc else _with_doc(code)
    parts: list[tuple[str, str]] = [("line", f"{c.code} {c.name} ({c.severity_text})"), ("line", c.title),
                                    ("blank", ""), ("doc", c.doc), ("blank", ""),
                                    ("line", f"Reported by: {c.reported_by}.")]
    if c.aliases:
        parts.append(("line", f"Former name{'s' if len(c.aliases) > 1 else ''}, still accepted: {', '.join(c.aliases)}."))
    if c.superseded_by:
        parts.append(("line", f"Folded into {', '.join(c.superseded_by)} when both are in one report (docs/codes.md)."))
    others = [s for s in _specs() if c.code in s.superseded_by]
    if others:
        parts.append(("line", f"Absorbs {', '.join(s.code for s in others)} when both are in one report (docs/codes.md)."))
    if c.options:
        how = {"trace": "--option CODE.NAME=VALUE", "memory": "--option CODE.NAME=VALUE (gpuprof memory)",
               "runtime": 'gpuprof.profile(options={"CODE.NAME": value})'}.get(c.origin, "--option CODE.NAME=VALUE")
        parts += [("blank", ""), ("line", f"Options ({how}):")]
        parts += [("option", f"  {c.code}.{o.name} = {_fmt_default(o)}: {o.help}") for o in c.options]
    parts += [("blank", ""), ("line", "Triggers it:"), ("code", _indent(c.bad_example)), ("blank", ""),
              ("line", "Does not:"), ("code", _indent(c.good_example))]
    return parts


def _fmt_default(o: Option) -> str:
    if o.unit == "bytes" and isinstance(o.default, int):
        from gpuprof.units import fmt_bytes

        return f"{o.default!r} ({fmt_bytes(o.default)})"
    return repr(o.default)


# ---------------------------------------------------------------------------- long forms shipped in the package

# The codes declared without a doc string (runtime checks, memory codes) have their long form in
# gpuprof/data/explanations.md, package data, so an installed wheel explains every code. It is made
# from their sections of docs/capture.md and docs/memory.md (`python3 tests/longforms.py --write`), and
# tests/test_explanations.py fails when the two disagree.
_EXPLANATIONS = "explanations.md"


def _with_doc(spec: CodeSpec) -> CodeSpec:
    if spec.doc:
        return spec
    doc = _packaged_docs().get(spec.code)
    if not doc:
        # a gpuprof bug (a code added without its long form), caught by tests/test_explanations.py
        doc = f"(no long explanation is packaged for {spec.code}; see docs/{spec.docs_page or 'codes.md'})"
    return dataclasses.replace(spec, doc=doc)


@functools.cache
def _packaged_docs() -> dict[str, str]:
    """``### GPxxx name`` sections of the packaged explanations: code -> the section's text."""
    from importlib import resources

    try:
        text = resources.files("gpuprof").joinpath("data").joinpath(_EXPLANATIONS).read_text(encoding="utf-8")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for m in re.finditer(r"^### (GP\d{3})\b[^\n]*\n(.*?)(?=^#{1,3} |\Z)", text, re.S | re.M):
        out[m.group(1)] = m.group(2).strip()
    return out


def _indent(code: str) -> str:
    import textwrap

    return textwrap.indent(textwrap.dedent(code).strip("\n"), "    ")
