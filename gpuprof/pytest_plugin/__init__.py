"""gpuprof's pytest plugin: hold a test's training steps to limits (docs/pytest.md).

``@pytest.mark.gpuprof(max_step_ms=40, fail_on="warning", baseline="perf/train.json", max_regression="5%")``
on a test, or its ``gpuprof_profile`` fixture, profiles the optimizer steps the
test body takes (``gpuprof run``'s step clock, :mod:`.capture`) and fails the
test with the figures and findings that broke a limit (:mod:`.verdict`). The
run's files stay as the test's artefacts: under pytest's base temporary
directory (``<basetemp>/gpuprof/<test>/``), or ``--gpuprof-dir DIR``; the path
is in the failure message and the terminal summary.

Inert unless used: pytest loads this module through the ``pytest11`` entry
point in every session, so it imports nothing but pytest at load time and each
hook costs one marker or stash look-up per test; torch and the capture are
imported when a marked test runs. A failure of gpuprof's own is one warning,
never a failed test; the test's own exceptions pass through unchanged (the
same object, its traceback untouched).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.pytest_plugin.capture import TestCapture

__all__ = ["gpuprof_profile"]

MARKER = "gpuprof"
_PLAN = pytest.StashKey["TestCapture"]()
_PROP = "gpuprof_run_dir"  # user property carrying a test's run directory (travels back from xdist workers)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuprof", "gpuprof: training-step limits (docs/pytest.md)")
    group.addoption("--gpuprof-dir", metavar="DIR", default=None,
                    help="Keep each profiled test's files in DIR/<test>/ (default: pytest's base temporary "
                         "directory, <basetemp>/gpuprof/<test>/).")
    group.addoption("--gpuprof-update-baseline", action="store_true", default=False,
                    help="Write each marked test's report.json to its baseline=PATH instead of comparing with it.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpuprof(max_step_ms=None, fail_on='warning', baseline=None, max_regression='5%', metric='step_time', "
        "steps=5, select=(), ignore=()): profile the test's optimizer steps with gpuprof and fail it when they "
        "break these limits (docs/pytest.md)")
    chosen = _chosen_dir(config)
    if chosen is not None and chosen.exists() and not chosen.is_dir():
        raise pytest.UsageError(f"--gpuprof-dir {chosen}: not a directory")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        _plan(item, marker.args, marker.kwargs)


@pytest.fixture
def gpuprof_profile(request: pytest.FixtureRequest) -> "TestCapture":
    """Profile this test's training steps (the marker's limits, or the defaults: fail on a warning finding).

    The value has ``run_dir`` (the test's files), ``finish()`` (end the capture now and return the
    ``gpuprof.CaptureResult``, to assert on it in the test) and, once finished, ``result``.
    """
    plan = request.node.stash.get(_PLAN, None)
    return plan if plan is not None else _plan(request.node, (), {})


def _plan(item: pytest.Item, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> "TestCapture":
    """The test's capture, not started yet; a marker that is not right is the test's error, one line."""
    from gpuprof.pytest_plugin.capture import TestCapture, run_name
    from gpuprof.pytest_plugin.marker import MarkerError, parse_limits

    try:
        limits = parse_limits(args, kwargs, Path(str(item.path)).parent)
    except MarkerError as err:
        problem = str(err)
    else:
        problem = ""
    if problem:  # outside the except block: the one line, without "During handling of the above exception"
        pytest.fail(f"usage error: @pytest.mark.gpuprof on {item.nodeid}: {problem}", pytrace=False)
    logdir = _logdir(item.config)
    plan = TestCapture(logdir, run_name(item.nodeid, logdir), limits)
    item.stash[_PLAN] = plan
    return plan


def _chosen_dir(config: pytest.Config) -> Path | None:
    """``--gpuprof-dir``, relative to where pytest was started (a test's chdir does not move it)."""
    chosen = config.getoption("--gpuprof-dir")
    return Path(os.path.abspath(config.invocation_params.dir / chosen)) if chosen else None


def _logdir(config: pytest.Config) -> Path:
    chosen = _chosen_dir(config)
    if chosen is not None:
        return chosen
    factory = getattr(config, "_tmp_path_factory", None)  # the tmp_path_factory fixture's, made at configure
    # without pytest's tmpdir plugin (-p no:tmpdir): a folder where pytest was started
    base = factory.getbasetemp() if factory is not None else Path(config.invocation_params.dir) / ".pytest-gpuprof"
    return base / "gpuprof"


def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    plan = item.stash.get(_PLAN, None)
    if plan is None:
        return (yield)
    del item.stash[_PLAN]  # a rerun of the item (pytest-rerunfailures) plans a capture of its own
    started = plan.start()
    try:
        out = yield
    except BaseException as exc:  # the test's own failure: recorded, then re-raised as it came
        if started:
            plan.failed(exc)
            plan.finish()
            _record(item, plan)
        raise
    if started:
        plan.finish()
        _record(item, plan)
        _check(item, plan)
    return out


try:  # a new-style wrapper (pluggy >= 1.2, pytest >= 8); older, the hook is left out and the marker is inert
    pytest_runtest_call = pytest.hookimpl(wrapper=True)(pytest_runtest_call)
except TypeError:  # pragma: no cover - an old pluggy: never break the user's session for it
    del pytest_runtest_call


def _record(item: pytest.Item, plan: "TestCapture") -> None:
    if plan.run_dir.is_dir():
        item.user_properties.append((_PROP, str(plan.run_dir)))


def _check(item: pytest.Item, plan: "TestCapture") -> None:
    """Fail the test when its training broke a limit; gpuprof's own trouble is a warning."""
    from gpuprof.pytest_plugin.gate import failure

    try:
        text = failure(plan, update_baseline=bool(item.config.getoption("--gpuprof-update-baseline")))
    except Exception as err:  # noqa: BLE001 - gpuprof's own failure: one warning, the test keeps its outcome
        from gpuprof.pytest_plugin.capture import warn

        warn(f"checking this test's limits failed ({type(err).__name__}: {err}); they are not checked")
        return
    if text is not None:
        pytest.fail(text, pytrace=False)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    runs = [(r.outcome, r.nodeid, str(value)) for reports in terminalreporter.stats.values() for r in reports
            if getattr(r, "when", None) == "call" for name, value in getattr(r, "user_properties", ()) if name == _PROP]
    if not runs:
        return
    terminalreporter.write_sep("-", "gpuprof: profiled tests' files")
    for outcome, nodeid, run_dir in runs:
        terminalreporter.write_line(f"{outcome.upper():7} {nodeid}: {run_dir}")
