"""``gpuprof mcp --root DIR_OR_URL``: gpuprof's commands for coding agents, over the Model Context Protocol (stdio).

The server (:mod:`gpuprof.mcp.wire`) reads JSON-RPC messages on standard input and answers on standard
output until its input ends; its tools (:mod:`gpuprof.mcp.tools`) are the commands' own library paths,
reading only under the roots (:mod:`gpuprof.mcp.roots`). See docs/mcp.md.
"""

from __future__ import annotations

import click

__all__ = ["mcp_cmd"]

EPILOG = """\b
Tools: analyze, diff, memory, history, export, explain, rules (docs/mcp.md).
\b
Exit codes:
  0  the client closed the connection (the end of standard input)
  2  bad usage or a --root that is not a directory or URL (one line)
  3  internal gpuprof error
  130, 143  Ctrl-C, SIGTERM: the request in progress is abandoned
A tool's failure is a tool result with isError and the command line's
error line; it never ends the server.
"""


@click.command("mcp", epilog=EPILOG)
@click.option("--root", "roots", multiple=True, required=True, metavar="DIR_OR_URL",
              help="A folder or URL prefix (s3://bucket/runs/) the tools may read; repeat for more. Nothing "
                   "outside them is read; export writes only under a folder root (or into a new temporary folder).")
def mcp_cmd(roots: tuple[str, ...]) -> None:
    """Serve analyze, diff, memory, history, export, explain and rules to a coding agent over MCP (stdio).

    Register it with the agent as a stdio server whose command is
    `gpuprof mcp --root RUNS_DIR` (docs/mcp.md has the JSON snippet). Each
    tool answers what the command's --format json prints, with a summary.
    """
    import signal
    import sys

    from gpuprof.mcp.roots import Roots
    from gpuprof.mcp.tools import Toolbox
    from gpuprof.mcp.wire import Server, serve
    from gpuprof.render.safe import visible
    from gpuprof.version import __version__

    served = Roots.of(roots)  # a bad root: one line, exit 2, before anything is served
    # SIGTERM (how a client ends a server that does not leave when its input closes) and Ctrl-C unwind the request
    # in progress: an export's half-written files and temporary folder are removed on the way out (exit 143, 130)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if sys.stdin is not None and sys.stdin.isatty():
        click.echo("gpuprof mcp: serving the Model Context Protocol on standard input and output for "
                   + ", ".join(visible(r) for r in served.shown()) + " (an agent starts this; Ctrl-D ends it)", err=True)
    serve(Server(Toolbox(served), version=__version__))


def _stop(signum: int, _frame: object) -> None:
    from gpuprof.mcp.wire import request_stop

    request_stop(128 + signum)  # also seen after the request, should a cleanup on the way turn this exit into an error
    raise SystemExit(128 + signum)
