"""Shared fixtures, and which tests the README's fast command leaves out. Helpers for locating real traces
live in gpuprof_testing.realtraces.

**Fast and slow.** The README's test command runs ``pytest -m "not slow"``; ``.ci/run`` runs that, then
``pytest -m slow``, so CI runs every test. ``slow`` marks a test the fast command leaves out: one that trains
a model, starts interpreters that import torch, a framework or a browser, or feeds a long hostile input.
Finer markers say why and imply ``slow`` here (pytest_collection_modifyitems): ``frameworks`` (Lightning,
transformers, accelerate, Dask), ``browser`` (headless chromium; every test that uses the ``browser``
fixture gets it). A module whose ``pytestmark`` carries one of them (or ``slow``) is not even imported when
the ``-m`` expression leaves out every test it could hold (pytest_ignore_collect): importing Lightning
alone costs ~4 s of CPU, half of the whole suite's collection.
"""

from __future__ import annotations

import ast
import itertools
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprof.runner import STRICT_ENV
from gpuprof_testing.realtraces import v100_samples as _v100_samples
from gpuprof_testing.trackerruns import TRACKER_ENV, is_local_address, offline_env, reset_trackers


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


# markers that put a test out of the fast command (pyproject.toml registers and describes them)
SLOW_MARKERS = frozenset({"slow", "frameworks", "browser"})


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection, which reads the markers added here
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("browser"):
            item.add_marker("browser")
        if not item.get_closest_marker("slow") and any(item.get_closest_marker(m) for m in SLOW_MARKERS):
            item.add_marker("slow")


def module_markers(path: Path) -> frozenset[str]:
    """The marker names of a test module's top-level ``pytestmark = ...`` (``pytest.mark.NAME`` or a list of
    them), read from its source without importing it; empty where there is none or it is not that simple."""
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                        and sub.value.attr == "mark"):
                    names.add(sub.attr)
    return frozenset(names)


def can_select(markexpr: str, markers: frozenset[str]) -> bool:
    """Whether ``-m markexpr`` can select some test that carries all of ``markers`` (and any others): tried
    with every other name in the expression on and off. True when that cannot be told (then the module is
    collected as usual)."""
    try:
        from _pytest.mark.expression import IDENT_PREFIX, Expression

        expr = Expression.compile(markexpr)
        free = sorted({n[len(IDENT_PREFIX):] for n in expr._code.co_names if n.startswith(IDENT_PREFIX)} - markers)
        if len(free) > 10:
            return True
        return any(expr.evaluate(_has(markers | {n for n, v in zip(free, values) if v}))
                   for values in itertools.product((False, True), repeat=len(free)))
    except Exception:  # a private pytest API: where it changed, collect everything as before
        return True


def _has(on: frozenset[str]) -> Any:
    return lambda name, /, **kwargs: name in on


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip importing a test module none of whose tests the ``-m`` expression could select (see the top)."""
    markexpr = config.getoption("markexpr", "") or ""
    if not markexpr or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    markers = module_markers(collection_path)
    if not markers & SLOW_MARKERS:
        return None
    return True if not can_select(markexpr, markers | {"slow"}) else None


# Trackers in their offline modes (tests/trackers, tests/security): W&B with WANDB_MODE=offline, MLflow with a
# file store, both in tmp_path (gpuprof_testing.trackerruns.offline_env says why a file store and not sqlite).
# ``no_network`` refuses and records every connection the test process opens to another machine (W&B's client
# talks to its own service process over a local socket, which is allowed).

@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Both trackers offline, everything they write under ``tmp_path/trackers``; yields that folder."""
    reset_trackers()
    for name in TRACKER_ENV:
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "trackers"
    for name, value in offline_env(root).items():
        monkeypatch.setenv(name, value)
    yield root
    reset_trackers()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Connections to anything but this machine, refused and recorded: the test asserts the list stays empty."""
    outside: list[object] = []
    real = socket.socket.connect

    def connect(self: socket.socket, address: object) -> None:
        if not is_local_address(self.family, address):
            outside.append(address)
            raise OSError("tests: no network")
        real(self, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    yield outside
