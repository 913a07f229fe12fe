"""Shared fixtures. Helpers for locating real traces live in gpuprof.testing.realtraces."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprof.runner import STRICT_ENV
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


HEADLESS_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One headless chromium (playwright) for a test module: launched with the module's
    ``BROWSER_ARGS`` if it has them, else HEADLESS_ARGS; skipped without playwright. The modules
    that use it skip themselves where Debian's chromium is missing."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=getattr(request.module, "BROWSER_ARGS", HEADLESS_ARGS))
        try:
            yield b
        finally:
            b.close()
