"""``gpuprof mcp``'s server, without the command line: the JSON-RPC wire (:mod:`gpuprof.mcp.wire`), the roots it
reads under (:mod:`gpuprof.mcp.roots`) and its tools (:mod:`gpuprof.mcp.tools`), which call the commands' library
paths (:mod:`gpuprof.commands`) as the command line does. Nothing here imports click or ``gpuprof.cli``
(``tests/test_layers.py``); ``gpuprof/cli/mcp.py`` only parses ``--root`` and starts :func:`gpuprof.mcp.wire.serve`.
"""
