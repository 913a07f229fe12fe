"""Fuzz: damaged real traces never make gpuprof raise a traceback.

Mutated traces (byte flips, truncation, deleted or inserted ranges, gzip
damage) go through :func:`gpuprof.trace.load.load_trace` and through
``gpuprof analyze``. The only acceptable outcomes are a loaded trace / a
report (exit 0 or 1) or one :class:`~gpuprof.errors.InputError` line
naming the file (exit 2). Bounded: a fixed number of examples, small seeds.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpuprof.trace.chunks as C
import gpuprof.trace.load as L
from gpuprof.cli import cli
from gpuprof.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, InputError
from gpuprof_testing import TraceBuilder, simple_training
from gpuprof_testing.realtraces import MISSING, TRACES

HTA = TRACES / "hta" / "HolisticTraceAnalysis" / "tests" / "data"
# Small real traces of several dialects (15-70 KB of JSON each).
REAL_SEEDS = [
    HTA / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    HTA / "triton_example" / "triton_example.json.gz",
    HTA / "critical_path" / "cuda_event_sync" / "event_sync_trace.json.gz",
    HTA / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    TRACES / "tbplugin" / "synthetic_libkineto" / "before_fix_trace.json",
]


def _synthetic(dialect: str) -> bytes:
    tb = TraceBuilder(dialect=dialect, profile_memory=True)
    simple_training(tb, steps=2, layers=2)
    with tb.step():
        tb.sync_item(line=("train.py", 42))
        tb.copy_h2d(4096)
    return tb.to_bytes()


def _seeds() -> list[tuple[str, bytes]]:
    out = [("synthetic-modern", _synthetic("modern")), ("synthetic-2021", _synthetic("2021"))]
    for p in REAL_SEEDS:
        if p.exists():
            data = p.read_bytes()
            out.append((p.name, gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data))
    return out


SEEDS = _seeds()


@st.composite
def damaged(draw: st.DrawFn) -> tuple[str, bytes, bool, int]:
    """(seed name, file bytes, gzipped?, BLOCK to load with)."""
    name, text = draw(st.sampled_from(SEEDS))
    data = bytearray(text)
    n = len(data)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "delete", "insert", "splice"]))
        n = len(data)
        if n == 0:
            break
        i = draw(st.integers(0, n - 1))
        if op == "flip":
            data[i] ^= draw(st.integers(1, 255))
        elif op == "truncate":
            del data[i:]
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 200))]
        elif op == "insert":
            data[i:i] = draw(st.sampled_from([b"}", b",", b"{", b'"', b"]", b"[", b"},{", b"\xff", b"\x00",
                                               b'"ts": "x"', b"null", b"1e999", b"\\"]))
        else:  # copy a range elsewhere: duplicated or misplaced structure
            j = draw(st.integers(0, n - 1))
            data[j:j] = data[i : i + draw(st.integers(1, 300))]
    blob = bytes(data)
    gz = draw(st.booleans())
    if gz:
        blob = bytearray(gzip.compress(blob, compresslevel=1))
        damage = draw(st.sampled_from(["none", "flip", "truncate"]))
        if damage == "flip" and len(blob) > 12:
            blob[draw(st.integers(10, len(blob) - 1))] ^= draw(st.integers(1, 255))
        elif damage == "truncate":
            del blob[draw(st.integers(0, len(blob) - 1)) :]
        blob = bytes(blob)
    block = draw(st.sampled_from([C.BLOCK, 4096, 512]))
    return name, blob, gz, block


def _check_input_error(err: InputError, path: Path) -> None:
    msg = str(err)
    assert "\n" not in msg and msg.startswith(f"{path}: ") and err.problem


@pytest.mark.skipif(len(SEEDS) < 3, reason=MISSING)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=damaged())
def test_damaged_traces_load_or_fail_in_one_line(case: tuple[str, bytes, bool, int]) -> None:
    _name, blob, gz, block = case
    d = Path(tempfile.mkdtemp(prefix="gpuprof-fuzz-"))
    saved = C.BLOCK
    try:
        p = d / ("t.json.gz" if gz else "t.json")
        p.write_bytes(blob)
        C.BLOCK = block
        try:
            t = L.load_trace(p)
        except InputError as err:
            _check_input_error(err, p)
        else:
            assert t.num_events > 0 and t.kept_events <= t.num_events
            for events in t.lists().values():
                assert all(a.ts <= b.ts for a, b in zip(events, events[1:]))
    finally:
        C.BLOCK = saved
        shutil.rmtree(d)


@pytest.mark.skipif(len(SEEDS) < 3, reason=MISSING)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=damaged())
def test_damaged_traces_through_the_cli(case: tuple[str, bytes, bool, int]) -> None:
    _name, blob, gz, _block = case
    d = Path(tempfile.mkdtemp(prefix="gpuprof-fuzz-"))
    try:
        p = d / ("t.json.gz" if gz else "t.json")
        p.write_bytes(blob)
        result = CliRunner().invoke(cli, ["analyze", str(p), "--format", "json", "-o", str(d / "r.json")])
        # no traceback: click catches SystemExit only; any other exception is a bug
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
        assert result.exit_code in (EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT), (result.exit_code, result.stderr)
        assert "Traceback" not in result.output and "internal error" not in result.stderr
        if result.exit_code == EXIT_BAD_INPUT:
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"gpuprof: error: {p}: "), result.stderr
        else:
            assert (d / "r.json").stat().st_size > 0
    finally:
        shutil.rmtree(d)


def test_seeds_are_valid_before_damage(tmp_path: Path) -> None:
    """The fuzz only means something if the undamaged seeds load."""
    for i, (name, text) in enumerate(SEEDS):
        p = tmp_path / f"{i}.json"
        p.write_bytes(text)
        assert L.load_trace(p).num_events > 0, name
