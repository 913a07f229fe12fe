"""Shared fixtures. Helpers for locating real traces live in gpuprof.testing.realtraces."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprof.testing.realtraces import v100_samples as _v100_samples


@pytest.fixture
def v100_samples() -> list[Path]:
    return _v100_samples()
