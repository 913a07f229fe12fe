"""The registry of every code (gpuprof.codes): completeness, unique names, options per origin, overlap policy."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuprof.analysis import analyze
from gpuprof.cli import cli
from gpuprof.codes import (
    apply_overlaps,
    catalogue,
    check_registry,
    lookup,
    parse_option_overrides,
    parse_options,
    resolve_selectors,
)
from gpuprof.codespec import CodeSpec
from gpuprof.findings import Evidence, Finding, Severity
from gpuprof.memory.codes import MEMORY_CODES
from gpuprof.rules.base import all_rules
from gpuprof.runtimecodes import RUNTIME_CHECKS, runtime_check
from gpuprof_testing.realtraces import shared_path

REPO = Path(__file__).resolve().parents[1]
NW0 = ("tbplugin", "samples", "resnet50_num_workers_0", "worker0.1623143089861.pt.trace.json.gz")


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_every_code_in_the_docs_is_listed_and_explained() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    named = {c for p in pages for c in re.findall(r"\bGP\d{3}\b", p.read_text(encoding="utf-8"))}
    assert len(named) >= 35, sorted(named)
    listing = _run("rules", "--format", "markdown").stdout
    listed = {ln.split("|")[1].strip() for ln in listing.splitlines() if re.match(r"\| GP\d{3} ", ln)}
    assert named <= listed, sorted(named - listed)
    for code in sorted(named):
        res = _run("explain", code)
        assert res.exit_code == 0 and res.stdout.startswith(code), (code, res.output)
        assert "Triggers it:" in res.stdout and "Does not:" in res.stdout, code
    # memory and runtime codes show their options like the trace rules do
    assert "GP510.capacity_threshold = 0.9: " in _run("explain", "GP510").stdout
    assert "GP640.leak_min_bytes_per_step = 65536 (64.0 KiB): " in _run("explain", "memory-growth").stdout


def test_every_code_is_complete_and_names_are_unique() -> None:
    cat = catalogue()
    origins = {c.origin for c in cat}
    assert {"trace", "memory", "runtime"} <= origins
    assert {c.code for c in cat} >= {r.code for r in all_rules()} | {c.code for c in MEMORY_CODES + RUNTIME_CHECKS}
    names = [c.name for c in cat]
    assert len(names) == len(set(names))
    for c in cat:
        assert c.title and len(c.doc) > 40 and "not found beside" not in c.doc, c.code
        assert c.bad_example.strip() and c.good_example.strip(), c.code
        assert c.bad_example.strip() != c.good_example.strip(), c.code
        for o in c.options:
            assert o.help, (c.code, o.name)
            assert o.parse(str(o.default)) == o.default, (c.code, o.name)
    # the former shared names are aliases now: explain takes the current owner, --select both
    assert [c.code for c in lookup("dataloader-main-process")] == ["GP601"]
    assert [c.code for c in lookup("dataloader-single-process")] == ["GP102"]
    assert resolve_selectors(["out-of-memory", "gp1", "host-sync"]) == ["GP512", "GP641", "GP1", "GP203"]
    with pytest.raises(ValueError, match="unknown code or name 'no-such-name'"):
        resolve_selectors(["no-such-name"])


def test_registry_refuses_duplicates_and_bad_overlaps() -> None:
    a = CodeSpec("GP990", "some-name", Severity.INFO, "t", "trace")
    with pytest.raises(ValueError, match="name 'some-name' belongs to GP990 and GP991"):
        check_registry([a, dataclasses.replace(a, code="GP991")])
    with pytest.raises(ValueError, match="declared twice"):
        check_registry([a, dataclasses.replace(a, name="other")])
    with pytest.raises(ValueError, match="supersede each other"):
        check_registry([dataclasses.replace(a, superseded_by=("GP991",)),
                        CodeSpec("GP991", "b", Severity.INFO, "t", "memory", superseded_by=("GP990",))])
    with pytest.raises(ValueError, match="unknown origin"):
        CodeSpec("GP992", "c", Severity.INFO, "t", "nowhere")


def test_option_parsing_is_one_shape_and_checks_the_origin() -> None:
    assert parse_options(["GP511.fragmentation_min_bytes=64MiB", "low-gpu-utilization.min_utilization=0.5"]) == {
        "GP511": {"fragmentation_min_bytes": 64 << 20}, "GP101": {"min_utilization": 0.5}}
    # capture's mapping: Python values are type-checked, text is parsed
    assert parse_options({"GP640.leak_min_steps": 12, "GP640.leak_min_total_bytes": "1MiB"}) == {
        "GP640": {"leak_min_steps": 12, "leak_min_total_bytes": 1 << 20}}
    with pytest.raises(ValueError, match="expected int"):
        parse_options({"GP640.leak_min_steps": 1.5})
    with pytest.raises(ValueError, match="GP510 is reported by gpuprof memory, not by gpuprof analyze"):
        parse_option_overrides(["GP510.capacity_threshold=0.5"])
    with pytest.raises(ValueError, match="GP640 has no option 'nope'"):
        parse_options(["GP640.nope=1"])


@pytest.mark.slow  # slow pass: a real trace (or job) analysed whole; the README's fast command stays under 300 CPU s on a 2-core VM
def test_analyze_option_applies_to_a_real_trace() -> None:
    path = str(shared_path(*NW0))
    base = next(f for f in analyze(path).findings if f.code == "GP102")
    assert base.evidence[0].threshold != 0.99
    # a threshold above the measured share silences the rule; the same spelling as memory's and capture's
    res = _run("analyze", path, "--format", "json", "--option", "GP102.min_share=0.99", "--fail-on", "error")
    assert res.exit_code == 0, res.output
    codes = {f["code"] for f in json.loads(res.stdout)["findings"]}
    # the findings, not the text: traces[].cause_per_step names every declared rule's figure, fired or not
    assert "GP102" not in codes and "GP101" in codes
    bad = _run("analyze", path, "--option", "GP640.leak_min_steps=3")
    assert bad.exit_code == 2 and "GP640 is reported by capture" in bad.output


def test_memory_option_and_its_alias_flag_apply(tmp_path: Path) -> None:
    from gpuprof.memory.snapshot import dump_snapshot
    from gpuprof_testing.snapshots import GiB, MiB, SnapshotBuilder

    b = SnapshotBuilder(device_memory=1 * GiB)
    b.alloc(800 * MiB, b.stack(("/home/u/m.py", 1, "f")))  # 78 % of the device
    snap = tmp_path / "s.pickle"
    dump_snapshot(b.snapshot(), snap)

    def codes(*extra: str) -> set[str]:
        res = _run("memory", str(snap), "--format", "json", "--fail-on", "error", *extra)
        assert res.exit_code == 0, res.output
        return set(re.findall(r'"code": "(GP\d+)"', res.stdout))

    assert "GP510" not in codes()  # default 0.90
    assert "GP510" in codes("--option", "GP510.capacity_threshold=0.75")
    assert "GP510" in codes("--capacity-threshold", "0.75")  # the former flag is an alias of the option
    assert "GP510" not in codes("--capacity-threshold", "0.75", "--option", "GP510.capacity_threshold=0.9")
    bad = _run("memory", str(snap), "--option", "GP101.min_utilization=0.5")
    assert bad.exit_code == 2 and "not by gpuprof memory" in bad.output


def test_capture_takes_the_same_option_mapping(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import gpuprof
    from gpuprof.capture import Schedule

    kept: list = []

    def run(sub: str, options: dict) -> list[str]:
        with gpuprof.profile(tmp_path / sub, schedule=Schedule(wait=1, warmup=1, active=4), print_report=False,
                             tensorboard=False, options=options) as prof:
            for _ in range(7):
                kept.append(torch.randn(256, 256))  # 256 KiB kept every step: a leak (GP640)
                prof.step()
        assert prof.report is not None
        return [f.code for f in prof.report.findings]

    default = run("default", {})
    assert "GP640" in default and "GP903" not in default
    # a runtime check's threshold and a trace rule's (the end-of-run analysis), in one mapping
    changed = run("changed", {"GP640.leak_min_bytes_per_step": "1GiB", "GP903.max_events": 1})
    assert "GP640" not in changed and "GP903" in changed
    with pytest.raises(ValueError, match="GP510 is reported by gpuprof memory, not by capture"):
        gpuprof.profile(tmp_path / "x", options={"GP510.capacity_threshold": 0.5})


def test_overlap_policy_folds_the_superseded_finding() -> None:
    found = analyze(str(shared_path(*NW0))).findings
    gp102 = [f for f in found if f.code == "GP102"]
    assert gp102
    c = runtime_check("GP601")
    gp601 = Finding(code=c.code, name=c.name, severity=c.severity, message="num_workers=0 measured",
                    advice="use workers", evidence=(Evidence("data_loading_share", 0.3, 0.1, "fraction"),),
                    origin="runtime")
    merged = apply_overlaps([gp601, *found])
    assert "GP102" not in {f.code for f in merged}
    kept = next(f for f in merged if f.code == "GP601")
    sup = kept.evidence[-1]
    assert sup.metric == "supersedes" and sup.value == "GP102" and sup.extra["message"] == gp102[0].message
    # a folded report folded again with the trace's findings (capture's report.json read back by
    # `gpuprof analyze RUN`) keeps one "supersedes" evidence, not two
    again = apply_overlaps([kept, *found])
    kept_again = next(f for f in again if f.code == "GP601")
    assert [e.value for e in kept_again.evidence if e.metric == "supersedes"] == ["GP102"]
    # without GP601 nothing changes; the policy is the registry's superseded_by, nothing else
    assert apply_overlaps(found) == found
    declared = {(c.code, w) for c in catalogue() for w in c.superseded_by}
    assert {("GP102", "GP601"), ("GP501", "GP510"), ("GP641", "GP512")} <= declared


def test_gpuprof_testing_needs_no_test_framework(tmp_path: Path) -> None:
    from gpuprof_testing import realtraces

    # the helpers live in tests/support/, outside the package: the child finds them as a bench script does, by its path
    tests = str(Path(realtraces.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p))
    code = ("import sys; sys.modules['pytest'] = None\n"
            "import gpuprof_testing, gpuprof_testing.tracegen, gpuprof_testing.realtraces as rt, unittest\n"
            "try:\n    rt.shared_path('no', 'such', 'file')\nexcept unittest.SkipTest as e:\n    print('skip:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("skip: real data "), out.stdout
    # with the data present the reason names the missing file; without it, the one reason for every such skip
    assert ("no/such/file" in out.stdout) == realtraces.available(), out.stdout
    assert realtraces.available() or out.stdout.strip() == "skip: " + realtraces.MISSING
