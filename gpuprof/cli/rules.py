"""``gpuprof rules`` and ``gpuprof explain CODE``: every finding code (see :mod:`gpuprof.codes`)."""

from __future__ import annotations

from typing import Any

import click

from gpuprof.errors import EXIT_BAD_INPUT, GpuprofError

__all__ = ["rules_cmd", "explain_cmd"]


@click.command("rules")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown"]), default="terminal", show_default=True)
def rules_cmd(fmt: str) -> None:
    """List every finding code: trace rules, memory findings and capture's runtime checks."""
    from gpuprof.codes import catalogue
    from gpuprof.commands.explain import reported_by_short

    codes = catalogue()
    if fmt == "markdown":
        lines = ["| code | name | severity | reported by | what it finds |", "|---|---|---|---|---|"]
        lines += [f"| {c.code} | {c.name} | {c.severity_text} | {reported_by_short(c.reported_by)} | {c.title} |" for c in codes]
        click.echo("\n".join(lines))
        return
    from rich.console import Console
    from rich.text import Text

    from gpuprof.render.layout import table_lines, wrap_text
    from gpuprof.render.terminal import terminal_width

    # the terminal's width (COLUMNS when piped): a table with every code, name, severity and "by"
    # whole on its row and the description wrapped at blanks; when that does not fit, each code on a
    # line of its own with its description wrapped below it
    width = terminal_width()
    console = Console(width=width, highlight=False, emoji=False, soft_wrap=False)
    rows = [(c.code, c.name, c.severity_text, reported_by_short(c.reported_by), c.title) for c in codes]
    out, stacked = table_lines([("code", "left"), ("name", "left"), ("severity", "left"), ("by", "left"),
                                  ("what it finds", "wrap")], rows, width)
    if stacked:
        out = []
        for code, name, severity, by, title in rows:
            out += [Text(f"{code}  {name}  {severity}  {by}", style="bold")]
            out += [Text("       " + part) for part in wrap_text(title, width - 7, indent=0)]
    for line in out:
        console.print(line, no_wrap=True, overflow="ignore", crop=False)


@click.command("explain")
@click.argument("code")
def explain_cmd(code: str) -> None:
    """Explain a finding code (or a name): what it detects, why it matters, its options and examples."""
    from gpuprof.commands.explain import explained

    try:
        spec, note = explained(code)
    except GpuprofError as err:
        click.echo(f"gpuprof: error: {err}", err=True)
        raise SystemExit(EXIT_BAD_INPUT) from None
    click.echo(_fit(spec))
    if note:
        click.echo(f"gpuprof: note: {note}", err=True)


def _fit(spec: Any) -> str:
    """:func:`gpuprof.codes.explain_text` fitted to the terminal's width (``COLUMNS`` when piped):
    prose and option help re-wrapped at blanks, so no word is cut by the terminal's own wrapping
    and a wide terminal gets long lines."""
    from gpuprof.codes import explain_parts
    from gpuprof.render.layout import reflow, wrap_text
    from gpuprof.render.terminal import terminal_width

    width = terminal_width()
    lines: list[str] = []
    for kind, text in explain_parts(spec):
        if kind == "doc":
            lines += reflow(text, width)
        elif kind == "option":  # "  CODE.NAME = default: help", its help continuing under the name
            lines += wrap_text(text, width, indent=6)
        elif kind == "code":
            for line in text.splitlines():
                lines += _fit_code(line, width)
        elif kind == "blank":
            lines.append("")
        else:
            lines += wrap_text(" ".join(text.split()), width, indent=0)
    return "\n".join(lines)


def _fit_code(line: str, width: int) -> list[str]:
    """An example's line in ``width``: a trailing comment too long for it goes on as ``#`` lines
    under itself (or, when it starts too far right, above the code); the code stays runnable."""
    from gpuprof.render.layout import wrap_text

    if len(line) <= width:
        return [line]
    code, sep, comment = line.partition("  #")
    if sep and len(code.rstrip()) <= width:
        col = len(code) + 2
        if width - col >= 20:
            body = wrap_text(comment.strip(), width - col - 2, indent=0)
            return [code + "  # " + body[0]] + [" " * col + "# " + b for b in body[1:]]
        lead = " " * (len(code) - len(code.lstrip()))
        return [lead + "# " + b for b in wrap_text(comment.strip(), width - len(lead) - 2, indent=0)] + [code.rstrip()]
    return wrap_text(line, width, indent=len(line) - len(line.lstrip()) + 4)
