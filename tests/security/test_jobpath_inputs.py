"""The job's critical path across ranks: hostile names stay data, tampered node reports are refused, size is bounded.

The job's path names operators and kernels of every rank (from their traces, or from node reports a
later merge reads), so a name aimed at a terminal, markdown or a page must reach them as inert text, and a
node report whose path fields were edited must be one line naming the file and the field (exit 2), never a
traceback or a path that walks out of its lists.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from gpuprof.analysis import analyze
from gpuprof.distributed.jobpath import JOB_KINDS
from gpuprof.render import render
from gpuprof.render.safe import UNSAFE_CODEPOINTS
from gpuprof.render.terminal import render_terminal
from gpuprof.trace.critpath import hops
from gpuprof.trace.critpath.path import MAX_PART_NAME, MAX_PARTS, PATH_KINDS
from gpuprof_testing.tracegen import TraceBuilder

from .conftest import HTML_HOSTILE, HUGE_NAME, TEXT_HOSTILE

NAMES = HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
_SGR = re.compile(r"\x1b\[[0-9;]*m")
TRANSFER_US = 1_000.0


def _unsafe(text: str) -> list[str]:
    return sorted({repr(c) for c in text if ord(c) in UNSAFE_CODEPOINTS and c != "\n"})


def _job(tmp: Path, late_op: str, late_us: float = 8_000.0, steps: int = 2, kernels: int = 0,
         dirs: tuple[str, str] = ("rank0", "rank1")) -> list[Path]:
    """Two ranks; rank 1 runs ``late_op`` on the host before its all-reduce, rank 0 waits for it inside its own
    (each all-reduce ends at the latest arrival plus the transfer, as NCCL's). ``kernels``: that many distinctly
    named kernels first."""
    tbs = [TraceBuilder(rank=k, world_size=2, start_us=5e9 + 3_000_000.0 * k) for k in range(2)]

    def step(tb: TraceBuilder, k: int, n: int, ar_us: float) -> float:
        with tb.step():
            for i in range(kernels):
                tb.kernel(f"k{n}_{i}_" + "x" * 100, us=20.0)
            tb.gemm(us=2_000.0)
            if k == 1:
                tb.cpu(us=late_us, name=late_op)
            ar = tb.nccl(us=ar_us, wait_for_compute=True)
            tb.device_synchronize()
        return float(ar["ts"]) - tb.start_us

    for n in range(steps):
        arrive = [step(copy.deepcopy(tb), k, n, TRANSFER_US) for k, tb in enumerate(tbs)]  # a dry run: the arrival
        end = max(arrive) + TRANSFER_US
        for k, tb in enumerate(tbs):
            step(tb, k, n, end - arrive[k])
    return [tb.write(tmp / d / "t.pt.trace.json") for tb, d in zip(tbs, dirs)]


def _cross(report: Any) -> Any:
    (sec,) = [s for s in report.sections if s.kind == "cross_rank"]
    return sec


@pytest.mark.parametrize("name", NAMES, ids=[f"name{i}" for i in range(len(NAMES))])
def test_hostile_names_on_the_job_path_stay_text(name: str, tmp_path: Path) -> None:
    report = analyze([str(p) for p in _job(tmp_path, name)])
    cp = _cross(report).critical_path
    shown = name if len(name) <= MAX_PART_NAME else name[:MAX_PART_NAME] + "\u2026"
    assert cp is not None and any(p.name == shown and p.rank == 1 for p in cp.parts), cp.parts  # it is on the path

    out = _SGR.sub("", render_terminal(report, color=True, width=160))
    assert "\x1b" not in out and _unsafe(out) == []
    assert "job critical path" in out

    md = render(report, "markdown")
    assert _unsafe(md) == []
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    inline = [c for t in tokens if t.type == "inline" for c in (t.children or [])]
    assert not [t for t in tokens if t.type == "html_block"] and not [c for c in inline if c.type == "html_inline"]
    assert not [c for c in inline if c.type == "link_open"]

    doc = json.loads(render(report, "json"))
    (sec,) = [s for s in doc["sections"] if s["kind"] == "cross_rank"]
    assert any(p["name"] == shown for p in sec["critical_path"]["parts"])  # JSON: exactly that, as data


def test_hostile_rank_directories_stay_data(tmp_path: Path) -> None:
    dirs = ("<img src=x onerror=alert(1)>rank0", "[link=http://evil.example/]rank1[/link]")
    report = analyze([str(p) for p in _job(tmp_path, "aten::late", dirs=dirs)])
    sec = _cross(report)
    assert sec.critical_path is not None and set(sec.critical_path.ranks) <= {0, 1}
    md = render(report, "markdown")
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    assert not [t for t in tokens if t.type == "html_block"]


def test_many_distinct_names_keep_the_summary_and_the_path_bounded(tmp_path: Path) -> None:
    report = analyze([str(p) for p in _job(tmp_path, "aten::late", late_us=100.0, kernels=600)])
    sec = _cross(report)
    cp = sec.critical_path
    assert cp is not None
    assert len(cp.parts) <= MAX_PARTS + len(JOB_KINDS)
    assert sum(p.us for p in cp.parts) == pytest.approx(cp.length_us)
    for s in sec.summaries:  # per segment at most the early pieces, the named ones and one "(other)" per kind
        segs = len(s.path_seg_end)
        assert segs == s.num_steps + len(s.inst_type)
        assert len(s.path_piece_us) <= (s.num_steps * (hops.EARLY + MAX_PARTS + len(PATH_KINDS))
                                        + len(s.inst_type) * (hops.EARLY + hops.NAMED + len(PATH_KINDS)))
        assert len(s.path_names) <= len(s.path_piece_us) + len(s.inst_type)


def test_walks_over_the_budget_leave_collectives_out_and_the_path_says_so(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """No arrival walked at all: at the collective rank 0 waited at, the path cannot follow rank 1 and counts
    rank 0's wait there as waiting for rank 1; the parts still add up to the step."""
    monkeypatch.setattr(hops, "BUDGET_FACTOR", 0)
    monkeypatch.setattr(hops, "BUDGET_MIN", -1)
    report = analyze([str(p) for p in _job(tmp_path, "aten::late", late_us=8_000.0)])
    sec = _cross(report)
    assert all(e == hops.NOT_WALKED for s in sec.summaries for e in s.path_seg_end[s.num_steps:])
    cp = sec.critical_path
    assert cp is not None and sum(p.us for p in cp.parts) == pytest.approx(cp.length_us)
    wait = sum(p.us for p in cp.parts if p.kind == "rank_wait" and p.name == "waiting for rank 1")
    r0, r1 = sec.summaries
    # rank 0's all-reduce less rank 1's, per step: rank 0 waited while rank 1 ran the 8 ms operator (its 2 ms gemm
    # overlapped it)
    assert wait == pytest.approx(sum(a - b for a, b in zip(r0.inst_dur, r1.inst_dur)) / r0.num_steps)
    assert wait > 5_900.0


def _node(tmp: Path, paths: list[Path]) -> list[Path]:
    from click.testing import CliRunner

    from gpuprof.cli import cli

    out = []
    for k, p in enumerate(paths):
        node = tmp / f"node{k}.json"
        res = CliRunner().invoke(cli, ["analyze", str(p), "--format", "json", "-o", str(node), "--fail-on", "never"])
        assert res.exit_code == 0, res.output
        out.append(node)
    return out


_TAMPER = [
    ("path_seg_end", lambda r: r["path_seg_end"].__setitem__(0, 10**6), "path_seg_end"),
    ("path_seg_end", lambda r: r["path_seg_end"].__setitem__(0, -7), "path_seg_end"),
    ("path_seg_off", lambda r: r["path_seg_off"].__setitem__(-1, 10**6), "path_seg_off"),
    ("path_seg_off", lambda r: r["path_seg_off"].pop(), "path_seg_off"),
    ("path_piece_kind", lambda r: r["path_piece_kind"].__setitem__(0, 99), "path_piece_kind"),
    ("path_piece_name", lambda r: r["path_piece_name"].__setitem__(0, 10**6), "path_names"),
    ("path_piece_us", lambda r: r["path_piece_us"].__setitem__(0, -5.0), "path_piece_us"),
    ("path_seg_early", lambda r: r["path_seg_early"].__setitem__(0, 10**6), "path_seg_early"),
    ("path_step_end", lambda r: r["path_step_end"].append(1.0), "path_step"),
    ("inst_path_name", lambda r: r["inst_path_name"].__setitem__(0, 10**6), "path_names"),
]


@pytest.mark.parametrize("field,change,named", _TAMPER, ids=[f"{t[0]}-{i}" for i, t in enumerate(_TAMPER)])
def test_a_tampered_path_field_in_a_node_report_is_one_line_exit_2(field: str, change: Any, named: str,
                                                                     tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gpuprof.cli import cli

    nodes = _node(tmp_path, _job(tmp_path, "aten::late"))
    doc = json.loads(nodes[1].read_text())
    rank = doc["sections"][0]["ranks"][0]
    assert rank[field], field  # the real summary has it to get wrong
    change(rank)
    nodes[1].write_text(json.dumps(doc))
    res = CliRunner().invoke(cli, ["analyze", *map(str, nodes)])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "node1.json" in line and named in line, line


def test_a_path_piece_that_is_not_finite_is_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gpuprof.cli import cli

    nodes = _node(tmp_path, _job(tmp_path, "aten::late"))
    text = nodes[0].read_text()
    doc = json.loads(text)
    doc["sections"][0]["ranks"][0]["path_piece_us"][0] = float("nan")
    nodes[0].write_text(json.dumps(doc))  # (json.dumps writes NaN, which is not JSON)
    res = CliRunner().invoke(cli, ["analyze", *map(str, nodes)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "node0.json" in res.output and "path_piece_us" in res.output
