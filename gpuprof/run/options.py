"""What ``gpuprof run`` hands to every Python process of the job: one JSON environment variable.

The parent (:mod:`gpuprof.run.launch`) writes :data:`ENV`; the bootstrap
(:mod:`gpuprof.run.bootstrap`) reads it in each process the job starts
(torchrun's agent and workers, DataLoader workers, ``accelerate launch``'s
children). ``capture`` holds :class:`~gpuprof.capture.config.CaptureConfig`
fields by name (``watch``, ``hang_timeout``, ``max_auto_windows``,
``trigger``); the child keeps only the fields its gpuprof has, so the command
line stays the same while the capture grows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["ENV", "RunOptions", "parse_step_function", "StepFunctionSpec"]

ENV = "GPUPROF_RUN_CONFIG"
#: at most this many bytes of JSON are read from :data:`ENV` (it is ours, but the environment is anyone's)
MAX_ENV_BYTES = 64 * 1024

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# a function: dotted names (Class.method), where ``<locals>`` may stand between an enclosing function and the
# function defined in it (Python's own __qualname__: main.<locals>.train_step)
_ATTR = rf"{_IDENT}(?:\.(?:<locals>\.)?{_IDENT})*"
_STEP_FN = re.compile(rf"^({_IDENT}(?:\.{_IDENT})*):({_ATTR})$")
# the file form: a path ending in .py (no NUL, no newline), then the function
_STEP_FILE = re.compile(rf"^([^\x00\n:]*\.py):({_ATTR})$")
MAX_SPEC = 4096  # characters of --step-function read (a path and a name)

#: the JSON scalar types a capture option may have
Scalar = bool | int | float | str | None


@dataclass(frozen=True)
class StepFunctionSpec:
    """``module:function`` or ``path/to/file.py:function`` of ``--step-function`` (``function`` may be
    ``Class.method``, or ``outer.inner`` / ``outer.<locals>.inner`` for a function defined in a function)."""

    module: str  # the module's dotted name; for the file form, the file's name without .py
    attr: str  # as given, ``<locals>`` dropped: outer.inner
    path: str | None = None  # the file form's path, as given

    def __str__(self) -> str:
        return f"{self.path if self.path is not None else self.module}:{self.attr}"


def parse_step_function(text: str) -> StepFunctionSpec:
    """``module:function`` or ``file.py:function`` -> spec; ValueError (one line) when it is neither form."""
    raw = text.strip()
    # a name ending in .py is a file (train.py:step), never a module ``train`` holding a submodule ``py``
    f = _STEP_FILE.match(raw) if len(raw) <= MAX_SPEC else None
    m = _STEP_FN.match(raw) if f is None and len(raw) <= MAX_SPEC else None
    if m is None and f is None:
        shown = raw if len(raw) <= 200 else raw[:200] + "..."
        raise ValueError(f"--step-function {shown!r} is not MODULE:FUNCTION or FILE.py:FUNCTION (e.g. "
                         "train:train_step, __main__:Trainer.step, src/train.py:main.train_step)")
    if m is not None:
        return StepFunctionSpec(m.group(1), m.group(2).replace("<locals>.", ""))
    assert f is not None
    path = f.group(1)
    name = path.replace("\\", "/").rsplit("/", 1)[-1][:-3]
    return StepFunctionSpec(name, f.group(2).replace("<locals>.", ""), path)


@dataclass(frozen=True)
class RunOptions:
    """The options of one ``gpuprof run`` (see :mod:`gpuprof.cli.run`)."""

    logdir: str = "gpuprof_logs"
    run: str | None = None
    step_function: str | None = None
    capture: Mapping[str, Scalar] = field(default_factory=dict)

    def to_env(self) -> str:
        return json.dumps({"logdir": self.logdir, "run": self.run, "step_function": self.step_function,
                           "capture": dict(self.capture)})

    @classmethod
    def from_env(cls, text: str) -> "RunOptions":
        """Parse :data:`ENV`; ValueError for anything that is not what :meth:`to_env` writes."""
        if len(text) > MAX_ENV_BYTES:
            raise ValueError(f"{ENV} is longer than {MAX_ENV_BYTES} bytes")
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{ENV} is not a JSON object")
        logdir, run, fn, capture = data.get("logdir"), data.get("run"), data.get("step_function"), data.get("capture")
        if not isinstance(logdir, str) or not logdir:
            raise ValueError(f"{ENV}: logdir must be a non-empty string")
        if run is not None and not isinstance(run, str):
            raise ValueError(f"{ENV}: run must be a string")
        if fn is not None:
            if not isinstance(fn, str):
                raise ValueError(f"{ENV}: step_function must be a string")
            parse_step_function(fn)
        if capture is None:
            capture = {}
        if not isinstance(capture, dict) or not all(
                isinstance(k, str) and (v is None or isinstance(v, (bool, int, float, str))) for k, v in capture.items()):
            raise ValueError(f"{ENV}: capture must map names to JSON scalars")
        return cls(logdir=logdir, run=run, step_function=fn, capture=capture)
