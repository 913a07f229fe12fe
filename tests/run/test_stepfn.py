"""``--step-function``: its spellings (module, file, nested) and where the script defines the function
(gpuprof/run/stepfn.py), read from the source without running it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpuprof.run.options import parse_step_function
from gpuprof.run.stepfn import locate, locate_in_file

SCRIPT = textwrap.dedent('''
    import sys
    from dataclasses import dataclass

    from lib import imported_step


    @dataclass
    class Config:
        steps: int = 6


    class Trainer:
        def step(self, x):
            return x

        def fit(self):
            def inner_step(x):
                return x
            return inner_step


    def helper():
        return Config()


    cfg = helper()


    def infer_step(x):
        return x


    @some.decorator(1)
    @other
    def main():
        if cfg.steps:
            def nested_step(x):
                return infer_step(x)
        for _ in range(3):
            nested_step(1)


    def second():
        def twice(x):
            return x
        return twice


    def third():
        def twice(x):
            return x
        return twice
''')


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if line.strip().startswith(text))


def test_module_level_names_whatever_comes_before_them() -> None:
    """Classes, a dataclass, a helper called at module level above the function: still module level (the
    former watch gave up on any of them)."""
    for attr in ("infer_step", "Trainer.step", "Config", "imported_step", "cfg"):
        assert locate(SCRIPT, attr).kind == "module" and locate(SCRIPT, attr).attr == attr


def test_a_function_defined_in_a_function() -> None:
    for attr in ("main.nested_step", "nested_step"):
        got = locate(SCRIPT, attr)
        assert got.kind == "nested" and got.inner == "nested_step" and got.outer == "main"
        # the code object's first line is the first decorator's (what co_firstlineno says at run time)
        assert got.outer_line == _line("@some.decorator(1)") and got.line == _line("def nested_step")
    method = locate(SCRIPT, "Trainer.fit.inner_step")
    assert method.kind == "nested" and method.outer == "fit" and method.outer_line == _line("def fit")


def test_a_missing_or_ambiguous_function_is_one_line() -> None:
    assert locate(SCRIPT, "nope").problem == "the script defines no function 'nope'"
    assert locate(SCRIPT, "nope.step").problem == "the script defines no 'nope' at module level"
    twice = locate(SCRIPT, "twice")
    assert twice.kind == "missing" and "defined in more than one function" in twice.problem
    assert f"second.twice (line {_line('def second')})" in twice.problem
    assert locate(SCRIPT, "second.twice").kind == "nested"  # named with its function: no ambiguity


def test_unreadable_source_keeps_the_module_level_watch(tmp_path: Path) -> None:
    assert locate("def broken(:\n", "f").kind == "module"
    assert locate_in_file(str(tmp_path / "absent.py"), "f").kind == "module"
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    assert locate_in_file(str(script), "main.nested_step").kind == "nested"


def test_the_file_and_nested_spellings() -> None:
    spec = parse_step_function("src/train.py:main.<locals>.train_step")
    assert (spec.path, spec.module, spec.attr) == ("src/train.py", "train", "main.train_step")
    assert str(spec) == "src/train.py:main.train_step"
    spec = parse_step_function("__main__:Trainer.fit.<locals>.step")
    assert (spec.path, spec.module, spec.attr) == (None, "__main__", "Trainer.fit.step")
    for bad in ("t.py:", "t.py:f()", "t.py:<locals>.f", "m:f.<locals>", "a\nb.py:f", "t.py:f;g", "x" * 5000 + ".py:f"):
        with pytest.raises(ValueError):
            parse_step_function(bad)
