"""``gpuprof mcp``: an MCP client gets what the command line prints, and the protocol holds under bad messages.

The client is the ``mcp`` SDK's own (``tests/cli/mcp_clients.py``), in-process; each tool's JSON is
compared with the command line's ``--format json`` output for the same input (computed by the CLI here,
independently of the server), on a synthetic trace (always) and on a real shared trace (skipped without
the data).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.mcp.tools import TOOL_NAMES
from gpuprof.mcp.wire import PROTOCOL_VERSIONS, TooLong, read_lines
from gpuprof_testing.realtraces import shared_path
from gpuprof_testing.tracegen import TraceBuilder, simple_training

from .mcp_clients import sdk_call, server_for

NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143566756.pt.trace.json.gz")


def cli_json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*args, "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(res.stdout)
    assert isinstance(doc, dict)
    return doc


def slow_loader_trace(path: Path, data_ms: float = 30.0, steps: int = 6) -> Path:
    """A training loop whose data loading keeps the GPU idle: findings GP101/GP103/GP302 (checked below)."""
    return simple_training(TraceBuilder(), steps=steps, data_ms=data_ms).write(path)


def tool(server: Any, name: str, arguments: dict[str, Any]) -> Any:
    async def work(session: Any) -> Any:
        return await session.call_tool(name, arguments)

    return sdk_call(server, work)


def test_tools_list_names_every_tool_with_its_input_schema(tmp_path: Path) -> None:
    async def work(session: Any) -> Any:
        return await session.list_tools()

    listed = sdk_call(server_for(tmp_path), work).tools
    assert [t.name for t in listed] == list(TOOL_NAMES)
    assert {"analyze", "diff", "memory", "explain", "history", "export", "rules"} <= set(TOOL_NAMES)
    for t in listed:
        schema = t.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        assert t.description
    analyze = next(t for t in listed if t.name == "analyze")
    assert analyze.input_schema["required"] == ["paths"]
    export = next(t for t in listed if t.name == "export")
    assert export.input_schema["properties"]["format"]["enum"] == ["csv", "parquet", "arrow"]
    assert export.annotations.read_only_hint is False and analyze.annotations.read_only_hint is True
    assert analyze.annotations.open_world_hint is False  # folders only
    with_urls = server_for(tmp_path, "memory://bucket/runs").tools.describe()
    assert {t["name"]: t["annotations"]["openWorldHint"] for t in with_urls}["analyze"] is True


def test_analyze_answers_the_findings_the_command_line_prints_synthetic(tmp_path: Path) -> None:
    trace = slow_loader_trace(tmp_path / "run" / "t.pt.trace.json")
    expected = cli_json("analyze", str(trace))
    assert {f["code"] for f in expected["findings"]} >= {"GP101", "GP103"}  # the planted idle GPU is found
    got = tool(server_for(tmp_path), "analyze", {"paths": "run/t.pt.trace.json"})
    assert not got.is_error
    assert got.structured_content == expected  # the whole report: same JSON as `gpuprof analyze --format json`
    assert json.loads(got.content[1].text) == expected
    summary = got.content[0].text
    assert f"{len(expected['findings'])} findings" in summary and "GP101" in summary


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_analyze_answers_the_findings_the_command_line_prints_real(tmp_path: Path) -> None:
    trace = shared_path(*NW0)
    expected = cli_json("analyze", str(trace), "--timeline")
    assert expected["findings"]
    server = server_for(trace.parent)
    got = tool(server, "analyze", {"paths": [trace.name], "timeline": True})
    assert not got.is_error, got.content[0].text
    assert got.structured_content["findings"] == expected["findings"]
    assert got.structured_content["traces"][0]["step_time_us"] == expected["traces"][0]["step_time_us"]
    assert got.structured_content["traces"][0]["views"] == expected["traces"][0]["views"]
    assert got.structured_content["traces"][0]["timeline"] == expected["traces"][0]["timeline"]  # asked for: kept
    plain = tool(server, "analyze", {"paths": [trace.name]}).structured_content  # as the command line, by default
    assert plain["traces"][0]["timeline"] is None and plain["findings"] == expected["findings"]
    brief = tool(server, "analyze", {"paths": trace.name, "views": False}).structured_content
    assert "views" not in brief["traces"][0] and brief["findings"] == expected["findings"]
    assert "timeline" not in brief["traces"][0] and expected["traces"][0]["timeline"]["lanes"]
    without = {k: v for k, v in expected["traces"][0].items() if k not in ("views", "timeline")}
    assert brief["traces"][0] == without  # only the tables and the timeline left out
    assert len(json.dumps(brief)) < len(json.dumps(expected)) / 3  # most of a real report's size


def test_progress_reaches_a_client_that_asks_for_it(tmp_path: Path) -> None:
    trace = slow_loader_trace(tmp_path / "run" / "t.pt.trace.json", steps=40)
    seen: list[tuple[float, Any, Any]] = []

    async def work(session: Any) -> Any:
        async def report(progress: float, total: Any, message: Any) -> None:
            seen.append((progress, total, message))

        result = await session.call_tool("analyze", {"paths": "run"}, progress_callback=report)
        import anyio

        await anyio.sleep(0.1)  # callbacks the session dispatched run
        return result

    assert not sdk_call(server_for(tmp_path), work).is_error
    assert seen, "no progress notification reached the client"
    values = [p for p, _, _ in seen]
    assert values == sorted(set(values))  # each further than the last, as the protocol asks
    assert values[-1] == trace.stat().st_size == seen[-1][1]  # the last says the whole file was read
    assert seen[-1][2] == f"reading t.pt.trace.json: {trace.stat().st_size:,} of {trace.stat().st_size:,} bytes"


def test_progress_is_throttled_increasing_and_ends_with_the_total() -> None:
    from gpuprof.mcp.wire import Progress

    sent: list[dict[str, Any]] = []
    p = Progress(sent.append, "tok", every_s=3600)
    p(10, None, "a")
    p(5, None, "back")  # never backwards
    p(20, None, "b")  # within the interval: held back
    p(100, 100, "done")  # the end is always sent
    assert [n["params"]["progress"] for n in sent] == [10, 100]
    assert sent[-1] == {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": "tok", "progress": 100, "message": "done", "total": 100}}
    silent = server_for(Path(__file__).parent)  # no progressToken: no notification
    silent.notify = sent.append
    silent.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "rules"}})
    assert len(sent) == 2


def test_a_path_outside_the_roots_is_a_tool_error_with_the_command_line_line(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    outside = slow_loader_trace(tmp_path / "outside.json")
    server = server_for(root)
    for name in (str(outside), "../outside.json", "/etc/passwd"):
        got = tool(server, "analyze", {"paths": name})
        assert got.is_error and got.structured_content is None
        line = got.content[0].text
        assert line.startswith(f"gpuprof: error: {name}: ") and "\n" not in line
    got = tool(server, "analyze", {"paths": str(outside)})
    assert "outside the folders and URL prefixes this server reads" in got.content[0].text
    assert str(root.resolve()) in got.content[0].text  # names where it may read


def test_every_tool_answers_the_command_lines_json(tmp_path: Path) -> None:
    slow_loader_trace(tmp_path / "a" / "t.pt.trace.json", data_ms=30.0)
    slow_loader_trace(tmp_path / "b" / "t.pt.trace.json", data_ms=1.0)
    server = server_for(tmp_path)
    diff = tool(server, "diff", {"before": "a", "after": "b", "fail_on_regression": "5%"})
    assert not diff.is_error, diff.content[0].text
    expected = cli_json("diff", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on-regression", "5%")
    assert diff.structured_content["metrics"] == expected["metrics"]
    assert diff.structured_content["regression"] == expected["regression"]
    assert diff.structured_content["regression"]["regressed"] is False  # faster loading: step time went down
    # history over two runs' saved reports
    for run in ("a", "b"):
        (tmp_path / "logs" / run).mkdir(parents=True)
        assert CliRunner().invoke(cli, ["analyze", str(tmp_path / run), "--format", "json", "--fail-on", "never",
                                        "-o", str(tmp_path / "logs" / run / "report.json")]).exit_code == 0
    hist = tool(server, "history", {"logdir": "logs"})
    assert not hist.is_error, hist.content[0].text
    assert hist.structured_content == cli_json("history", str(tmp_path / "logs"))
    assert [r["name"] for r in hist.structured_content["runs"]] == ["a", "b"]
    # explain and rules: the registry's words
    from gpuprof.codes import catalogue, explain_text, lookup

    exp = tool(server, "explain", {"code": "host-sync"})
    assert exp.structured_content["code"] == "GP203" and exp.content[0].text == explain_text(lookup("GP203")[0])
    rules = tool(server, "rules", {})
    assert [c["code"] for c in rules.structured_content["codes"]] == [c.code for c in catalogue()]
    unknown = tool(server, "explain", {"code": "GP999x"})
    assert unknown.is_error and unknown.content[0].text == "gpuprof: error: unknown code 'GP999x' (see `gpuprof rules`)"


def test_memory_answers_the_command_lines_json(tmp_path: Path) -> None:
    trace = simple_training(TraceBuilder(profile_memory=True), steps=4).write(tmp_path / "m.json")
    got = tool(server_for(tmp_path), "memory", {"file": "m.json", "top": 5})
    assert not got.is_error, got.content[0].text
    assert got.structured_content == cli_json("memory", str(trace), "--top", "5")


def test_export_writes_under_a_root_or_into_a_temporary_folder(tmp_path: Path) -> None:
    slow_loader_trace(tmp_path / "run" / "t.pt.trace.json")
    server = server_for(tmp_path)
    got = tool(server, "export", {"source": "run", "output": "tables"})
    assert not got.is_error, got.content[0].text
    doc = got.structured_content
    assert doc["directory"] == str(tmp_path.resolve() / "tables") and doc["temporary"] is False
    steps = (tmp_path / "tables" / "steps.csv").read_text().splitlines()
    assert doc["tables"]["steps"]["rows"] == len(steps) - 1 == 6  # one row per step of the trace, a header
    temp = tool(server, "export", {"source": "run"}).structured_content
    try:
        assert temp["temporary"] is True and Path(temp["tables"]["findings"]["file"]).is_file()
        assert not Path(temp["directory"]).resolve().is_relative_to(tmp_path.resolve())
    finally:
        import shutil

        shutil.rmtree(temp["directory"])


def test_bad_arguments_are_tool_errors_and_an_unknown_tool_a_protocol_error(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    server = server_for(tmp_path)
    for args, words in (({}, "'paths' is required"), ({"paths": 3}, "'paths' must be a string or"),
                        ({"paths": "x", "colour": 1}, "unknown argument 'colour'"),
                        ({"paths": []}, "'paths' must be")):
        got = tool(server, "analyze", args)
        assert got.is_error and words in got.content[0].text, got.content[0].text
    got = tool(server, "analyze", {"paths": "missing.json"})
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["analyze", "missing.json"])
    assert res.exit_code == 2
    assert got.is_error and got.content[0].text == res.stderr.strip() == "gpuprof: error: missing.json: no such file or directory"
    answer = server.handle({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "nope"}})
    assert answer["error"]["code"] == -32602 and "unknown tool" in answer["error"]["message"]


def test_protocol_errors_are_answers_and_the_session_goes_on(tmp_path: Path) -> None:
    server = server_for(tmp_path)
    assert server.handle_line(b"not json")["error"]["code"] == -32700
    assert server.handle_line(b"[" * 100_000 + b"]" * 100_000)["error"]["code"] == -32700  # nested too deep
    assert server.handle_line(b"\xff\xfe")["error"]["code"] == -32700
    assert server.handle_line(b"[]")["error"]["code"] == -32600  # a batch
    assert server.handle_line(b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}')["error"]["code"] == -32600
    assert server.handle_line(b'{"jsonrpc":"2.0","id":1,"method":"nope"}')["error"]["code"] == -32601
    assert server.handle_line(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":[1]}')["error"]["code"] == -32602
    assert server.handle_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') is None
    assert server.handle_line(b'{"jsonrpc":"2.0","id":2,"result":{}}') is None  # a response: no answer
    # a request cancelled before it ran gets no answer; the next one does
    assert server.handle_line(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}') is None
    assert server.handle_line(b'{"jsonrpc":"2.0","id":5,"method":"ping"}') is None
    assert server.handle_line(b'{"jsonrpc":"2.0","id":6,"method":"ping"}') == {"jsonrpc": "2.0", "id": 6, "result": {}}
    too_big = server.handle_line(TooLong(b'{"jsonrpc"'))
    assert too_big["error"]["code"] == -32600 and "GPUPROF_MCP_MAX_REQUEST_BYTES" in too_big["error"]["message"]


@pytest.mark.parametrize("asked", [*PROTOCOL_VERSIONS, "1999-01-01"])
def test_the_handshake_answers_the_revision_asked_or_the_newest(tmp_path: Path, asked: str) -> None:
    server = server_for(tmp_path)
    got = server.handle({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": asked, "capabilities": {}}})["result"]
    assert got["protocolVersion"] == (asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1])
    assert got["capabilities"] == {"tools": {"listChanged": False}}
    result = server.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                            "params": {"name": "explain", "arguments": {"code": "GP203"}}})["result"]
    # structured results exist from 2025-06-18 on; older clients get the JSON as text only
    assert ("structuredContent" in result) == (got["protocolVersion"] >= "2025-06-18")
    assert json.loads(result["content"][1]["text"])["code"] == "GP203"


def test_lines_are_read_bounded_and_a_long_one_is_skipped_whole() -> None:
    data = b'{"a":1}\n' + b"x" * 5_000_000 + b"\n" + b'{"b":2}\n' + b"y" * 300 + b"\n"
    chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)]
    held: list[int] = []

    def read(n: int) -> bytes:
        return chunks.pop(0) if chunks else b""

    lines = []
    for line in read_lines(read, limit=1000):
        lines.append(line)
        held.append(len(line.head) if isinstance(line, TooLong) else len(line))
    assert lines[0] == b'{"a":1}' and isinstance(lines[1], TooLong) and lines[2] == b'{"b":2}'
    assert lines[3] == b"y" * 300 and len(lines) == 4
    assert max(held) <= 1000  # nothing longer than the limit is ever handed on


RUN_SERVER = r'''
import atexit, json, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from gpuprof.cli import main
main(sys.argv[2:])
'''


def test_the_server_imports_neither_torch_nor_the_sdk(tmp_path: Path) -> None:
    """The real command, in a fresh interpreter, serving an analyze call: no torch, no MCP SDK, no capture."""
    import os
    import subprocess
    import sys

    from .mcp_clients import INITIALIZE, REPO, call

    slow_loader_trace(tmp_path / "run" / "t.pt.trace.json")
    modules = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", RUN_SERVER, str(modules), "mcp", "--root", str(tmp_path)],
                          input=INITIALIZE + call(1, "analyze", {"paths": "run"}), capture_output=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert proc.returncode == 0, proc.stderr.decode()
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [a["id"] for a in answers] == [0, 1] and answers[1]["result"]["isError"] is False
    assert answers[1]["result"]["structuredContent"]["findings"]  # the analysis ran
    loaded = set(json.loads(modules.read_text()))
    assert "gpuprof.analysis" in loaded  # the walk saw the analysis
    for name in ("torch", "mcp", "pydantic", "anyio", "gpuprof.capture.api", "gpuprof.capture.session"):
        assert name not in loaded, name


def test_memory_answers_the_command_lines_json_on_a_real_snapshot() -> None:
    from gpuprof_testing.realtraces import shared_snapshot

    snap = shared_snapshot("cs336_magma_memory_snapshot.pickle")
    expected = cli_json("memory", str(snap))
    got = tool(server_for(snap.parent), "memory", {"file": snap.name})
    assert not got.is_error, got.content[0].text
    doc = got.structured_content
    assert doc["findings"] == expected["findings"]
    # the same figures, the input named by the real path the server read rather than as given
    assert json.dumps(doc["sections"]).replace(str(snap.resolve()), str(snap)) == json.dumps(expected["sections"])


def test_memory_diff_answers_the_command_lines_json(tmp_path: Path) -> None:
    trace = simple_training(TraceBuilder(profile_memory=True), steps=4).write(tmp_path / "m.json")
    server = server_for(tmp_path)
    got = tool(server, "memory", {"file": "m.json", "diff": True})
    assert not got.is_error, got.content[0].text
    assert got.structured_content == cli_json("memory", "diff", str(trace))
    assert got.structured_content["command"] == "memory-diff"  # a diff, not `gpuprof memory FILE`
    assert [s["kind"] for s in got.structured_content["sections"]] == ["memory-diff"]
    both = tool(server, "memory", {"file": "m.json", "after": "m.json"})
    assert not both.is_error and both.structured_content == cli_json("memory", "diff", str(trace), str(trace))
    bad = tool(server, "memory", {"file": "m.json", "diff": True, "device_memory": "80GiB"})
    assert bad.is_error and "applies to one file" in bad.content[0].text


@pytest.mark.slow  # two interpreters: the SDK's client and the server it starts
def test_the_sdks_stdio_client_drives_the_real_command(tmp_path: Path) -> None:
    """The whole transport as an agent's host runs it: the SDK starts `gpuprof mcp`, speaks over its pipes,
    and closes it at the end."""
    pytest.importorskip("mcp", reason="the MCP SDK (the tests' client: gpuprof[test]) is not installed")
    import os
    import sys

    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from .mcp_clients import REPO

    trace = slow_loader_trace(tmp_path / "run" / "t.pt.trace.json")
    expected = cli_json("analyze", str(trace))
    seen: list[float] = []

    async def main() -> tuple[Any, Any, Any]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "gpuprof", "mcp", "--root", str(tmp_path)],
                                       env={"PYTHONPATH": str(REPO), "PATH": os.environ.get("PATH", "")}, cwd=str(REPO))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            await session.send_ping()

            async def report(progress: float, total: Any, message: Any) -> None:
                seen.append(progress)

            ok = await session.call_tool("analyze", {"paths": str(trace)}, progress_callback=report)
            await anyio.sleep(0.1)
            refused = await session.call_tool("analyze", {"paths": "/etc/passwd"})
            return init, ok, refused

    init, ok, refused = anyio.run(main)
    assert init.server_info.name == "gpuprof" and init.protocol_version == PROTOCOL_VERSIONS[-1]
    assert not ok.is_error and ok.structured_content["findings"] == expected["findings"]
    assert refused.is_error and "outside the folders" in refused.content[0].text
    assert seen and seen[-1] == trace.stat().st_size  # progress notifications over the real pipe


def test_a_gpuprof_bug_is_an_internal_error_line_and_its_traceback_under_debug(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuprof.commands import analyze as analyze_module

    def broken(*_args: Any, **_kw: Any) -> Any:
        raise ZeroDivisionError("planted")

    slow_loader_trace(tmp_path / "t.json")
    monkeypatch.setattr(analyze_module, "analysis_report", broken)
    server = server_for(tmp_path)
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "analyze", "arguments": {"paths": "t.json"}}}
    result = server.handle(request)["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == ("gpuprof: internal error: ZeroDivisionError: planted "
                                            "(a gpuprof bug; rerun with GPUPROF_DEBUG=1 for the traceback)")
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setenv("GPUPROF_DEBUG", "1")
    assert server.handle(request)["result"]["isError"] is True
    assert "ZeroDivisionError: planted" in capsys.readouterr().err  # the traceback, on standard error


def test_a_bad_option_value_is_the_command_lines_line_from_gpuprofs_own_error(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The library paths raise gpuprof's UsageError: the command line still prints click's line (with its help
    hint, exit 2) and the tool answers the same line without the hint."""
    slow_loader_trace(tmp_path / "a" / "t.pt.trace.json")
    simple_training(TraceBuilder(profile_memory=True), steps=4).write(tmp_path / "m.json")
    server = server_for(tmp_path)
    monkeypatch.chdir(tmp_path)
    cases = [("analyze", {"paths": "a", "options": ["GP101.nope=1"]}, ["analyze", "a", "--option", "GP101.nope=1"]),
             ("analyze", {"paths": "a", "select": ["no-such-rule"]}, ["analyze", "a", "--select", "no-such-rule"]),
             ("diff", {"before": "a", "after": "a", "metric": "speed"}, ["diff", "a", "a", "--metric", "speed"]),
             ("diff", {"before": "a", "after": "a", "fail_on_regression": "0.05"},
              ["diff", "a", "a", "--fail-on-regression", "0.05"]),
             ("memory", {"file": "m.json", "options": ["GP510.nope=1"]}, ["memory", "m.json", "--option", "GP510.nope=1"])]
    for name, args, argv in cases:
        got = tool(server, name, args)
        res = CliRunner().invoke(cli, argv, prog_name="gpuprof")
        assert res.exit_code == 2, (argv, res.output)
        line = res.stderr.strip()
        hint = f" (see 'gpuprof {argv[0]}{' show' if argv[0] == 'memory' else ''} --help')"
        assert line.startswith("gpuprof: error: ") and line.endswith(hint), line
        assert got.is_error and got.content[0].text == line.removesuffix(hint), (got.content[0].text, line)
    assert "Invalid value for --option: " in tool(server, "analyze", cases[0][1]).content[0].text


NO_CLICK = r'''
import json, sys
from gpuprof.mcp.roots import Roots
from gpuprof.mcp.tools import TOOL_NAMES, Toolbox
from gpuprof.mcp.wire import Server
box = Toolbox(Roots.of([sys.argv[1]]))
calls = {"analyze": {"paths": "a"}, "diff": {"before": "a", "after": "b", "fail_on_regression": "5%"},
         "memory": {"file": "m.json"}, "history": {"logdir": "logs"}, "export": {"source": "a", "output": "out"},
         "explain": {"code": "GP101"}, "rules": {}}
assert set(calls) == set(TOOL_NAMES), TOOL_NAMES
errors = {n: box.call(n, a, structured=False)["isError"] for n, a in calls.items()}
bad = box.call("analyze", {"paths": "a", "options": ["GP101.nope=1"]}, structured=False)
print(json.dumps({"errors": errors, "bad": bad["content"][0]["text"], "server": Server.__name__,
                  "loaded": sorted(m for m in sys.modules if m == "click" or m.startswith(("click.", "gpuprof.cli")))}))
'''


@pytest.mark.slow  # a fresh interpreter running every tool
def test_the_mcp_package_and_its_tools_load_no_click(tmp_path: Path) -> None:
    """Importing gpuprof.mcp and running every tool (a usage error too) loads neither click nor gpuprof.cli."""
    import os
    import subprocess
    import sys

    from .mcp_clients import REPO

    slow_loader_trace(tmp_path / "a" / "t.pt.trace.json", data_ms=30.0)
    slow_loader_trace(tmp_path / "b" / "t.pt.trace.json", data_ms=1.0)
    simple_training(TraceBuilder(profile_memory=True), steps=4).write(tmp_path / "m.json")
    (tmp_path / "logs" / "a").mkdir(parents=True)
    assert CliRunner().invoke(cli, ["analyze", str(tmp_path / "a"), "--format", "json", "--fail-on", "never",
                                    "-o", str(tmp_path / "logs" / "a" / "report.json")]).exit_code == 0
    proc = subprocess.run([sys.executable, "-c", NO_CLICK, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["errors"] == {"analyze": False, "diff": False, "memory": False, "history": False, "export": False,
                             "explain": False, "rules": False}  # every tool ran its library path
    assert got["bad"].startswith("gpuprof: error: Invalid value for --option: ")
    assert got["loaded"] == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir())  # the export wrote its tables under the root
