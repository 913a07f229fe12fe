"""The pytest plugin without training: the marker's arguments, its registration, its cost when unused, and that
gpuprof's own trouble is a warning (docs/pytest.md). The training runs are in test_sample_project.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import gpuprof.pytest_plugin as plugin_module
from gpuprof.diff.gate import parse_threshold
from gpuprof.pytest_plugin.marker import KEYS, Limits, MarkerError, parse_limits

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ("-p", "gpuprof.pytest_plugin")  # for a pytest in a subprocess; in this one, plugins=[plugin_module]


def test_the_entry_point_is_declared_under_the_module_name() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    eps = meta["project"]["entry-points"]["pytest11"]
    # the name is the module's: `-p gpuprof.pytest_plugin` and the autoload then register one plugin, not two
    assert eps == {"gpuprof.pytest_plugin": "gpuprof.pytest_plugin"}
    for hook in ("pytest_addoption", "pytest_configure", "pytest_runtest_setup", "pytest_runtest_call",
                 "pytest_terminal_summary", "gpuprof_profile"):
        assert callable(getattr(plugin_module, hook)), hook
    assert "pytest-xdist>=3" in meta["project"]["optional-dependencies"]["test"]


def test_loading_the_plugin_imports_no_torch_and_no_capture() -> None:
    code = ("import sys, gpuprof.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m == 'numpy' or m.startswith('gpuprof.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}).stdout
    loaded = eval(out)  # noqa: S307 - our own print of a list of names
    assert loaded == ["gpuprof.lazyexports", "gpuprof.notebookhook", "gpuprof.pytest_plugin", "gpuprof.version"]


def test_parse_defaults_and_values(tmp_path: Path) -> None:
    assert parse_limits((), {}, tmp_path) == Limits()
    lim = parse_limits((), {"max_step_ms": 40, "fail_on": "ERROR", "baseline": "perf/base.json",
                            "max_regression": "7.5%", "steps": 3, "select": "GP1,GP601", "ignore": ["GP901"]},
                       tmp_path)
    assert lim.max_step_ms == 40.0 and lim.fail_on == "error" and lim.steps == 3
    assert lim.baseline == tmp_path / "perf" / "base.json"  # relative to the test file's directory
    assert lim.max_regression == pytest.approx(0.075)
    assert lim.select == ("GP1", "GP601") and lim.ignore == ("GP901",)
    # a baseline alone is held to 5 %; an absolute path stays
    alone = parse_limits((), {"baseline": str(tmp_path / "b.json")}, Path("/elsewhere"))
    assert alone.baseline == tmp_path / "b.json" and alone.max_regression == pytest.approx(0.05)


@pytest.mark.parametrize("text", ["5%", "5", "0", "12.5%", "0.05%", 7])
def test_percentages_mean_what_gpuprof_diff_says(text: object, tmp_path: Path) -> None:
    lim = parse_limits((), {"baseline": "b.json", "max_regression": text}, tmp_path)
    assert lim.max_regression == parse_threshold(str(text))


@pytest.mark.parametrize(("args", "kwargs", "says"), [
    ((), {"max_step": 40}, "unknown key 'max_step' (known: " + ", ".join(KEYS) + ")"),
    ((40,), {}, "takes keyword arguments only"),
    ((), {"baseline": "b.json", "max_regression": "0.05"}, "ambiguous: write 5% for 5 per cent"),
    ((), {"baseline": "b.json", "max_regression": "five"}, "'five' is not a percentage such as 5% or 5"),
    ((), {"baseline": "b.json", "max_regression": "-3%"}, "must be a finite percentage >= 0"),
    ((), {"max_regression": "5%"}, "max_regression needs a baseline"),
    ((), {"max_step_ms": 0}, "max_step_ms=0: a number of milliseconds > 0"),
    ((), {"max_step_ms": True}, "max_step_ms=True"),
    ((), {"max_step_ms": float("nan")}, "max_step_ms=nan"),
    ((), {"fail_on": "warn"}, "fail_on='warn': one of info, warning, error, never"),
    ((), {"steps": 0}, "steps=0: the steps recorded, an int from 1 to 1000"),
    ((), {"steps": 2.5}, "steps=2.5"),
    ((), {"select": ["GP1", 3]}, "select=['GP1', 3]: codes, prefixes or names"),
    ((), {"ignore": "no-such-rule"}, "ignore: "),
    ((), {"baseline": "b.json", "metric": "speed"}, "metric='speed': one of step_time, "),
    ((), {"metric": "gpu_busy"}, "metric needs a baseline"),
    ((), {"baseline": 3}, "baseline=3: a path"),
])
def test_misuse_is_one_line_naming_the_key(args: tuple[object, ...], kwargs: dict[str, object], says: str,
                                          tmp_path: Path) -> None:
    with pytest.raises(MarkerError) as err:
        parse_limits(args, kwargs, tmp_path)
    assert says in str(err.value)
    assert "\n" not in str(err.value)


def test_misuse_in_a_suite_is_a_setup_error_with_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_misuse="""
        import pytest

        @pytest.mark.gpuprof(max_step=40)
        def test_typo():
            raise AssertionError("the body must not run")

        @pytest.mark.gpuprof(baseline="b.json", max_regression="0.05")
        def test_bad_percent():
            raise AssertionError("the body must not run")

        def test_unmarked():
            pass
    """)
    r = pytester.runpytest(plugins=[plugin_module])
    r.assert_outcomes(passed=1, errors=2)
    out = r.stdout.str()
    assert ("usage error: @pytest.mark.gpuprof on test_misuse.py::test_typo: unknown key 'max_step' (known: "
            "max_step_ms, ") in out
    assert "usage error: @pytest.mark.gpuprof on test_misuse.py::test_bad_percent: max_regression: '0.05' is " \
           "ambiguous" in out
    assert "the body must not run" not in out and "During handling" not in out and "Traceback" not in out


@pytest.mark.slow  # a real trace analysed whole / a bounded hostile wait: the slow pass
def test_an_unused_plugin_adds_nothing_to_a_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="""
        import sys

        def test_plain():
            assert "gpuprof.pytest_plugin.capture" not in sys.modules
            assert "torch" not in sys.modules
    """)
    r = pytester.runpytest_subprocess(*PLUGIN)
    r.assert_outcomes(passed=1)
    out = r.stdout.str()  # (installed, pytest's header lists the distribution among its plugins: nothing else)
    assert "gpuprof:" not in out and "profiled tests" not in out and "warning" not in out.lower()
    assert r.ret == 0
    r = pytester.runpytest("--markers", plugins=[plugin_module])
    assert "@pytest.mark.gpuprof(max_step_ms=None, fail_on='warning', baseline=None" in r.stdout.str()


def test_gpuprofs_own_failure_is_one_warning_and_the_test_passes(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        from gpuprof.pytest_plugin.capture import TestCapture

        def broken(self):
            raise RuntimeError("planted inside gpuprof")

        TestCapture.config = broken
    """)
    pytester.makepyfile(test_it="""
        import pytest

        @pytest.mark.gpuprof(max_step_ms=1)
        def test_body_runs():
            pass

        @pytest.mark.gpuprof(max_step_ms=1)
        def test_users_error_passes_through():
            raise KeyError("the user's own")
    """)
    r = pytester.runpytest(plugins=[plugin_module])
    r.assert_outcomes(passed=1, failed=1, warnings=2)
    out = r.stdout.str()
    assert "GpuprofWarning: gpuprof: cannot profile this test (RuntimeError: planted inside gpuprof); it runs " \
           "unprofiled" in out
    assert "KeyError: \"the user's own\"" in out
    assert "gpuprof: the test's training broke" not in out


def test_a_gpuprof_dir_that_is_a_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    (pytester.path / "taken").write_text("a file")
    r = pytester.runpytest("--gpuprof-dir", "taken", plugins=[plugin_module])
    assert r.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--gpuprof-dir {pytester.path / 'taken'}: not a directory" in r.stderr.str()
