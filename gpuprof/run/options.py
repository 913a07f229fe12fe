"""What ``gpuprof run`` hands to every Python process of the job: one typed struct, as JSON in one variable.

The parent (:mod:`gpuprof.run.launch`) writes :data:`ENV`; the bootstrap
(:mod:`gpuprof.run.bootstrap`) reads it in each process the job starts
(torchrun's agent and workers, DataLoader workers, ``accelerate launch``'s
children), decoded by msgspec into :class:`RunOptions`: the types hold what a
field may be (a non-empty logdir, ``MODULE:FUNCTION``, a timeout >= 0), so a
payload that is not what :meth:`RunOptions.to_env` writes is refused in one
line naming the field. :class:`CaptureOptions` are
:class:`~gpuprof.capture.config.CaptureConfig` fields by name (``watch``,
``hang_timeout``, ``max_auto_windows``, ``trigger``, ``to``), only those given
on the command line; the child ignores fields its gpuprof does not know and
passes on only those its capture has, so the command line stays the same
while the capture grows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec

__all__ = ["ENV", "CaptureOptions", "RunOptions", "TrialOptions", "TrialSettings", "parse_step_function",
           "StepFunctionSpec"]

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
#: what the options' ``step_function`` may hold: either form, around spaces (:func:`parse_step_function` strips them)
_STEP_FN_FIELD = rf"^\s*(?:{_IDENT}(?:\.{_IDENT})*|[^\x00\n:]*\.py):{_ATTR}\s*$"

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


class CaptureOptions(msgspec.Struct, frozen=True, omit_defaults=True):
    """The capture's options given to ``gpuprof run`` (None: not given, the capture's own default)."""

    watch: bool | None = None
    trigger: bool | None = None
    to: str | None = None  # tracker names, comma-separated (gpuprof.capture.end.trackers)
    hang_timeout: Annotated[float, msgspec.Meta(ge=0)] | None = None
    max_auto_windows: Annotated[int, msgspec.Meta(ge=0)] | None = None

    def given(self) -> dict[str, Scalar]:
        """The options given, by CaptureConfig field name."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


class TrialSettings(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The settings one ``gpuprof try`` trial applies to the job without editing it (None: the script's own).

    The DataLoader fields replace the arguments of every ``DataLoader`` the job builds (``persistent_workers``
    and ``prefetch_factor`` only where the loader has workers, as torch requires); ``matmul_precision`` is
    ``torch.set_float32_matmul_precision``; ``cudnn_benchmark`` is ``torch.backends.cudnn.benchmark``;
    ``zero_grad_set_to_none`` forces that argument of ``Optimizer.zero_grad`` and ``Module.zero_grad``;
    ``autocast`` runs each outermost call of a module holding parameters (the model's forward) under
    ``torch.autocast`` with that dtype; ``channels_last`` converts that model and its 4-D inputs to
    ``torch.channels_last``; ``compile`` compiles it in place (``Module.compile``); ``optimizer_foreach`` /
    ``optimizer_fused`` pass ``foreach=True`` / ``fused=True`` to every torch optimizer built that takes it."""

    num_workers: Annotated[int, msgspec.Meta(ge=0, le=1024)] | None = None
    persistent_workers: bool | None = None
    pin_memory: bool | None = None
    prefetch_factor: Annotated[int, msgspec.Meta(ge=1, le=1024)] | None = None
    matmul_precision: Literal["highest", "high", "medium"] | None = None
    cudnn_benchmark: bool | None = None
    zero_grad_set_to_none: bool | None = None
    autocast: Literal["bf16", "fp16"] | None = None
    channels_last: bool | None = None
    compile: bool | None = None
    optimizer_foreach: bool | None = None
    optimizer_fused: bool | None = None

    def given(self) -> dict[str, Scalar]:
        """The settings given, by field name."""
        return {k: v for k, v in msgspec.structs.asdict(self).items() if v is not None}


class TrialOptions(msgspec.Struct, frozen=True):
    """One trial of ``gpuprof try``: apply ``settings``, time ``steps`` optimizer steps after ``warmup``, write
    the result to ``result`` (a file of the try run directory), then end the process (exit code 0)."""

    result: Annotated[str, msgspec.Meta(min_length=1)]
    warmup: Annotated[int, msgspec.Meta(ge=1)] = 3
    steps: Annotated[int, msgspec.Meta(ge=1)] = 20
    settings: TrialSettings = msgspec.field(default_factory=TrialSettings)
    # the analysis trial of ``--variants auto``: ``gpuprof run``'s capture runs too (its report is what the
    # variants are picked from); the stop ends the capture first, so its report is written
    analyze: bool = False


class RunOptions(msgspec.Struct, frozen=True):
    """The options of one ``gpuprof run`` (see :mod:`gpuprof.cli.run`)."""

    logdir: Annotated[str, msgspec.Meta(min_length=1)]
    run: str | None = None
    step_function: Annotated[str, msgspec.Meta(pattern=_STEP_FN_FIELD)] | None = None  # MODULE:FUNCTION
    capture: CaptureOptions = msgspec.field(default_factory=CaptureOptions)
    verbose: bool = False  # gpuprof's messages during the run on stderr (else in each process's gpuprof.log)
    trial: TrialOptions | None = None  # gpuprof try: no capture; the trial's settings, timing and stop

    def to_env(self) -> str:
        """ASCII JSON (json's escapes): a name with bytes that are not UTF-8 (``surrogateescape``) goes through."""
        doc = msgspec.to_builtins(self)
        if doc.get("trial") is None:  # only gpuprof try's trials carry one
            doc.pop("trial", None)
        return json.dumps(doc)

    @classmethod
    def from_env(cls, text: str) -> RunOptions:
        """Decode :data:`ENV`; ValueError (one line, naming the field) for anything :meth:`to_env` never writes."""
        if len(text) > MAX_ENV_BYTES:
            raise ValueError(f"{ENV} is longer than {MAX_ENV_BYTES} bytes")
        try:
            return msgspec.convert(json.loads(text), type=cls)  # json: lone surrogates' escapes, as to_env writes
        except (ValueError, msgspec.ValidationError) as err:  # not JSON; a field of the wrong type or out of range
            raise ValueError(f"{ENV}: {err}") from None
