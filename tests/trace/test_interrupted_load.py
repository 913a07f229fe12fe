"""An interruption while a trace is read reaches the caller as itself, not as a BufferError.

Ctrl-C (or ``gpuprof mcp``'s SIGTERM) may land while a chunk's events are being ingested, when values decoded
from the chunk's buffer are still held: releasing the buffer's view then raised BufferError, which replaced
the interruption (``gpuprof analyze`` said "internal error", exit 3, instead of "interrupted", 130).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuprof.cli import cli
from gpuprof.trace import normalise
from gpuprof.trace.load import load_trace

# gpuprof's own capture of a CPU loop (in the repository): its operators' shapes and types are read as undecoded
# views of the chunk's buffer, which is what kept the buffer exported
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_trace"


def _interrupt_mid_chunk(monkeypatch: pytest.MonkeyPatch, error: type[BaseException]) -> list[int]:
    """Builder.ingest takes half of its first chunk, then raises ``error`` (the rest of that chunk still held)."""
    orig = normalise.Builder.ingest
    calls: list[int] = []

    def ingest(self: Any, events: list[Any]) -> None:
        calls.append(len(events))
        orig(self, events[: len(events) // 2])
        raise error

    monkeypatch.setattr(normalise.Builder, "ingest", ingest)
    return calls


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_an_interruption_mid_chunk_is_raised_as_itself(monkeypatch: pytest.MonkeyPatch, error: type[BaseException]) -> None:
    calls = _interrupt_mid_chunk(monkeypatch, error)
    with pytest.raises(error):
        load_trace(next(SAMPLE.glob("*.pt.trace.json.gz")))
    assert calls and calls[0] > 1  # the chunk was under way, half of it ingested


def test_ctrl_c_during_analyze_is_interrupted_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    _interrupt_mid_chunk(monkeypatch, KeyboardInterrupt)
    res = CliRunner().invoke(cli, ["analyze", str(SAMPLE)])
    assert res.exit_code == 130 and "gpuprof: interrupted" in res.stderr
    assert "internal error" not in res.stderr
