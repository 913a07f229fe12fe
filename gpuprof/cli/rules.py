"""``gpuprof rules`` and ``gpuprof explain CODE``: every finding code (see :mod:`gpuprof.codes`)."""

from __future__ import annotations

from typing import Any

import click

from gpuprof.errors import EXIT_BAD_INPUT

__all__ = ["rules_cmd", "explain_cmd"]


@click.command("rules")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown"]), default="terminal", show_default=True)
def rules_cmd(fmt: str) -> None:
    """List every finding code: trace rules, memory findings and capture's runtime checks."""
    from gpuprof.codes import catalogue

    codes = catalogue()
    if fmt == "markdown":
        lines = ["| code | name | severity | reported by | what it finds |", "|---|---|---|---|---|"]
        lines += [f"| {c.code} | {c.name} | {c.severity_text} | {_by(c.reported_by)} | {c.title} |" for c in codes]
        click.echo("\n".join(lines))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    for col in ("code", "name", "severity", "by", "what it finds"):
        table.add_column(col, no_wrap=col in ("code", "name", "by"))
    for c in codes:
        table.add_row(c.code, c.name, c.severity_text, _by(c.reported_by), c.title)
    Console().print(table)


def _by(reported_by: str) -> str:
    return reported_by.split(" (")[0].removeprefix("gpuprof ")


@click.command("explain")
@click.argument("code")
def explain_cmd(code: str) -> None:
    """Explain a finding code (or a name): what it detects, why it matters, its options and examples."""
    from gpuprof.codes import catalogue, explain_text, lookup

    def lookup_aliases(key: str) -> list[Any]:
        return [c for c in catalogue() if key.strip().lower() in c.aliases]

    found = lookup(code)
    if not found:
        click.echo(f"gpuprof: error: unknown code {code!r} (see `gpuprof rules`)", err=True)
        raise SystemExit(EXIT_BAD_INPUT)
    if len(found) > 1:
        which = ", ".join(f"{c.code} ({_by(c.reported_by)})" for c in found)
        click.echo(f"gpuprof: error: the former name {code!r} belongs to {which}; explain one by its code",
                   err=True)
        raise SystemExit(EXIT_BAD_INPUT)
    click.echo(explain_text(found[0]))
    also = [c for c in lookup_aliases(code) if c.code != found[0].code]
    if also:  # a current name that is also another code's former name: say so
        which = ", ".join(f"{c.code} ({c.name})" for c in also)
        click.echo(f"gpuprof: note: {code.strip().lower()!r} is also the former name of {which}", err=True)
