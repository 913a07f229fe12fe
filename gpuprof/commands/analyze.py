"""``gpuprof analyze``'s library path: the report of traces, a run folder or a saved report.json, before rendering."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from gpuprof.commands.options import split_codes
from gpuprof.errors import UsageError
from gpuprof.remote import TraceFile

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.report import Report

__all__ = ["analysis_report", "is_saved_report"]


def analysis_report(paths: Sequence[str], select: Sequence[str], ignore: Sequence[str], rule_options: Sequence[str],
                    *, all_sections: bool = True, jobs: int | None = None, dask: str | None = None,
                    progress: Callable[[TraceFile], Any] | None = None,
                    on_rank_done: Callable[[int, int], None] | None = None, timeline: bool = False) -> Report:
    """What ``gpuprof analyze PATHS`` reports, before rendering: the command line's and the MCP server's one path.

    A single saved report.json is read back (no trace is read, no rule runs); anything else is analysed.
    ``all_sections``: keep a saved report's sections whose renderers need the live objects (the JSON view).
    ``--option`` values and select/ignore words are checked here (a bad one: a :class:`UsageError`).
    ``timeline``: each analysed trace's timeline in the report (``--timeline``, ``--html``, ``--to``); a saved
    report keeps the timeline it holds.
    """
    from gpuprof.codes import parse_option_overrides

    try:
        options = parse_option_overrides(rule_options)
    except ValueError as err:
        raise UsageError(str(err), param_hint="--option") from None
    if len(paths) == 1 and is_saved_report(paths[0]):
        from gpuprof.saved.read import read_report, unshown_sections

        report = read_report(paths[0])
        if not all_sections:  # other sections' renderers draw their own objects, which a saved report no longer has
            report.sections = unshown_sections(report.sections)
        # the one boundary (gpuprof.flow.finish), as for a live analysis: --select/--ignore, overlaps, order
        from gpuprof.flow import finish
        from gpuprof.runner import Selection

        report.findings = finish(report.findings, Selection.of(split_codes(list(select)), split_codes(list(ignore))))
        return report
    from gpuprof.analysis import analyze

    path: str | list[str] = paths[0] if len(paths) == 1 else list(paths)
    return analyze(path, select=split_codes(list(select)), ignore=split_codes(list(ignore)), options=options,
                   progress=progress, jobs=jobs, dask=dask,  # jobs None: gpuprof.pool decides by size and free CPUs
                   on_rank_done=on_rank_done, timeline=timeline)


def is_saved_report(path: str) -> bool:
    """``path`` is a saved report.json (read back, not analysed)."""
    from gpuprof.inputs import is_report_file  # the reader (gpuprof.saved.read) only for a saved report

    return is_report_file(path)
