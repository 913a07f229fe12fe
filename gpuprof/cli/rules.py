"""``gpuprof rules`` and ``gpuprof explain CODE``: the rule catalogue."""

from __future__ import annotations

import click

from gpuprof.errors import EXIT_BAD_INPUT

__all__ = ["rules_cmd", "explain_cmd"]


@click.command("rules")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown"]), default="terminal", show_default=True)
def rules_cmd(fmt: str) -> None:
    """List every rule: code, name, default severity and title."""
    from gpuprof.rules.base import all_rules

    rules = all_rules()
    if fmt == "markdown":
        lines = ["| code | name | severity | what it finds |", "|---|---|---|---|"]
        lines += [f"| {r.code} | {r.name} | {r.severity.value} | {r.title} |" for r in rules]
        click.echo("\n".join(lines))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    for col in ("code", "name", "severity", "what it finds"):
        table.add_column(col)
    for r in rules:
        table.add_row(r.code, r.name, r.severity.value, r.title)
    Console().print(table)


@click.command("explain")
@click.argument("code")
def explain_cmd(code: str) -> None:
    """Explain a rule: what it detects, why it matters, its options and examples."""
    from gpuprof.rules.base import get_rule

    rule = get_rule(code)
    if rule is None:
        click.echo(f"gpuprof: error: unknown rule {code!r} (see `gpuprof rules`)", err=True)
        raise SystemExit(EXIT_BAD_INPUT)
    click.echo(explain_text(rule))


def explain_text(rule: type) -> str:
    parts = [f"{rule.code} {rule.name} ({rule.severity.value})", rule.title, "", rule.doc()]
    parts += ["", "Options (--option CODE.NAME=VALUE):"]
    parts += [f"  {o.name} = {o.default!r}: {o.help}" for o in rule.all_options()]
    parts += ["", "Triggers it:", _indent(rule.bad_example), "", "Does not:", _indent(rule.good_example)]
    return "\n".join(parts)


def _indent(code: str) -> str:
    import textwrap

    return textwrap.indent(textwrap.dedent(code).strip("\n"), "    ")
