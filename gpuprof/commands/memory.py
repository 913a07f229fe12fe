"""``gpuprof memory``'s library paths: the report of one snapshot or trace, of several ranks, and of a memory diff,
before rendering (the command line's and the MCP server's one path)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from gpuprof.commands.options import selection

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.report import Report

__all__ = ["memory_report", "memory_ranks_report", "memory_diff_report"]


def memory_report(file: str, select: Sequence[str], ignore: Sequence[str], settings: dict[str, Any],
                  device_memory: int | None = None, top: int = 10,
                  skip_frames: Sequence[str] = ()) -> tuple[Report, Any, Any]:
    """What ``gpuprof memory FILE`` reports, before rendering (the command line's and the MCP server's one path),
    with the loaded data and the per-device analyses the HTML timeline draws."""
    from gpuprof.flow import finish
    from gpuprof.memory.analysis import MemoryOptions, analyze_memory
    from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS
    from gpuprof.memory.load import load_memory
    from gpuprof.report import Report

    opts = MemoryOptions(top=top, internal_patterns=DEFAULT_INTERNAL_PATTERNS + tuple(skip_frames)
                         ).with_options(settings)
    data = load_memory(file, opts.internal_patterns)
    if device_memory:
        for dm in data.devices:
            if dm.device.startswith("cuda"):
                dm.total_memory = device_memory
    section, findings, analyses = analyze_memory(data, opts)
    findings = finish(findings, selection(tuple(select), tuple(ignore)))  # the one boundary (gpuprof.flow), --html included
    return Report(command="memory", inputs=[file], sections=[section], findings=findings), data, analyses


def memory_ranks_report(files: Sequence[str], select: Sequence[str], ignore: Sequence[str], settings: dict[str, Any],
                        device_memory: int | None = None, top: int = 10, skip_frames: Sequence[str] = ()) -> Report:
    """``gpuprof memory S0 S1 ...``: each file's section and findings (each finding names its file), then the
    cross-rank view (:mod:`gpuprof.memory.ranks`): identical within its tolerance, or which rank holds more and
    where."""
    from dataclasses import replace

    from gpuprof.memory.ranks import ranks_view
    from gpuprof.report import Report

    sections: list[Any] = []
    findings: list[Any] = []
    seen: dict[tuple[str, str], list[int]] = {}  # (code, message) -> [index in findings, ranks that gave it]
    for f in files:
        rep, _data, _analyses = memory_report(f, select, ignore, settings, device_memory, top, skip_frames)
        sections.extend(rep.sections)
        for x in rep.findings:  # a finding every rank gives alike is listed once, saying on how many ranks
            key = (x.code, x.message)
            if key in seen:
                seen[key][1] += 1
                continue
            seen[key] = [len(findings), 1]
            findings.append(x)
    for i, n in seen.values():
        if n > 1:
            findings[i] = replace(findings[i], message=f"{findings[i].message} (the same on {n} of the "
                                                       f"{len(files)} ranks)")
    view = ranks_view([(f, sec.to_dict()) for f, sec in zip(files, sections)])
    return Report(command="memory", inputs=list(files), sections=[*sections, view], findings=findings)


def memory_diff_report(before: str, after: str | None, select: Sequence[str], ignore: Sequence[str],
                       settings: dict[str, Any], top: int = 15, skip_frames: Sequence[str] = ()) -> Report:
    """What ``gpuprof memory diff BEFORE [AFTER]`` reports, before rendering (the command line's and the MCP
    server's one path)."""
    from gpuprof.flow import finish
    from gpuprof.memory.analysis import MemoryOptions
    from gpuprof.memory.diff import DiffOptions, diff_report
    from gpuprof.memory.frames import DEFAULT_INTERNAL_PATTERNS

    mem_opts = MemoryOptions(internal_patterns=DEFAULT_INTERNAL_PATTERNS + tuple(skip_frames)).with_options(settings)
    report = diff_report(before, after, DiffOptions(top=top).with_options(settings), mem_opts)
    report.findings = finish(report.findings, selection(tuple(select), tuple(ignore)))  # the one boundary (gpuprof.flow)
    return report
