"""Shared fixtures. Helpers for locating real traces live in gpuprof.testing.realtraces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.analysis import STRICT_ENV
from gpuprof.testing.realtraces import v100_samples as _v100_samples


@pytest.fixture(autouse=True)
def _strict_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules run strictly in every test: a rule that raises raises RuleError, even where
    gpuprof would collect the failure (the capture side), so a crashing rule fails its
    tests instead of looking like "no findings". Tests of the collecting path delenv it.
    Subprocesses (the CLI tests) inherit it."""
    monkeypatch.setenv(STRICT_ENV, "1")


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal report takes its width from COLUMNS when stdout is not a terminal; a COLUMNS
    exported by the shell that runs the tests must not change what they render. Tests of that
    set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture
def v100_samples() -> list[Path]:
    return _v100_samples()
