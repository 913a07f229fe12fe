"""``gpuprof --help`` lists every command from its summary in ``gpuprof.cli._COMMANDS``, importing none of the
command modules (issue 44, the ``help/click`` budget): each summary must stay the first paragraph of its
command's own help, so the list reads exactly as click would print it from the commands themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpuprof.cli import _COMMANDS, _Group, cli

REPO = Path(__file__).resolve().parents[2]


def _loaded_command(name: str) -> click.Command:
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None, name
    return cmd


@pytest.mark.parametrize("name", sorted(_COMMANDS))
def test_each_summary_is_the_first_paragraph_of_the_commands_help(name: str) -> None:
    cmd = _loaded_command(name)
    assert cmd.short_help is None and not cmd.hidden and not cmd.deprecated, name  # else the list would differ
    assert cmd.help is not None
    summary = _COMMANDS[name][2]
    assert summary.split() == cmd.help.partition("\n\n")[0].split(), name
    stand_in = click.Command(name, help=summary)
    for limit in range(4, 200):  # every width the terminal may give the list
        assert stand_in.get_short_help_str(limit) == cmd.get_short_help_str(limit), (name, limit)


@pytest.mark.parametrize("width", [40, 80, 200])
def test_the_list_reads_as_click_prints_it_from_the_loaded_commands(width: int) -> None:
    lazy = _Group(name="gpuprof", help=cli.help, epilog=cli.epilog, params=list(cli.params),
                  context_settings=cli.context_settings)
    assert not lazy.commands  # nothing loaded: the list comes from the summaries
    got = CliRunner().invoke(lazy, ["--help"], terminal_width=width, prog_name="gpuprof")
    assert not lazy.commands, sorted(lazy.commands)  # and listing them loaded none
    for name in _COMMANDS:
        _loaded_command(name)
    assert set(_COMMANDS) <= set(cli.commands)
    want = CliRunner().invoke(cli, ["--help"], terminal_width=width, prog_name="gpuprof")
    assert got.exit_code == want.exit_code == 0
    assert got.output == want.output
    assert all(f"\n  {name} " in got.output for name in _COMMANDS)


def test_help_in_a_fresh_interpreter_imports_no_command_module(tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    code = ("import atexit, json, sys\n"
            "atexit.register(lambda: open(sys.argv[1], 'w').write(json.dumps(sorted(sys.modules))))\n"
            "from gpuprof.cli import main\nmain(['--help'])\n")
    proc = subprocess.run([sys.executable, "-c", code, str(out)], cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(f"\n  {name} " in proc.stdout for name in _COMMANDS), proc.stdout
    ours = [m for m in json.loads(out.read_text()) if m.startswith("gpuprof.")]
    assert not [m for m in ours if m.startswith("gpuprof.cli.")], ours
    assert "gpuprof.errors" not in ours and "gpuprof.findings" not in ours, ours
