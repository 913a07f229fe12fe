"""The commands' library paths: what ``gpuprof analyze``, ``diff``, ``memory``, ``export`` and ``explain`` compute
before anything is printed, one path for the command line (:mod:`gpuprof.cli`) and the MCP server
(:mod:`gpuprof.mcp`) alike.

A bad option value is a :class:`gpuprof.errors.UsageError`, a bad input an :class:`gpuprof.errors.InputError`:
gpuprof's own errors, never click's. The command line turns them into its usage errors and exit codes; the MCP
server into a tool result with ``isError``. Nothing here imports click.
"""
