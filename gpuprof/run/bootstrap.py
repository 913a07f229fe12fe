"""What ``gpuprof run`` does inside every Python process of the job (loaded by its ``sitecustomize``).

Nothing, until the process imports torch: then it hooks the optimizer's step
(the step clock, :mod:`gpuprof.run.clock`), patches the DataLoader so loaders
built before the first step are known, wraps
``torch.distributed.destroy_process_group`` so the capture ends while the
process group can still gather the cross-rank report; an uncaught exception's
story (a device mismatch...) reaches the report through ``sitecustomize``'s
excepthook (:func:`on_uncaught`). Lightning's and Hugging Face's ``Trainer`` get gpuprof's
callback when they are built. ``--step-function module:function`` wraps that
function instead of counting optimizer steps.

Every part runs under :func:`_guarded`: a failure is one line on stderr and
the script runs on as if gpuprof were not there.
"""

from __future__ import annotations

import functools
import os
import sys
from types import FrameType, ModuleType
from typing import Any, Callable

from gpuprof.run import imports
from gpuprof.run.clock import OptimizerClock, framework_options, say, step_function_wrapper
from gpuprof.run.options import ENV, RunOptions, StepFunctionSpec, parse_step_function

__all__ = ["start", "CLOCK"]

CLOCK: OptimizerClock | None = None  # this process's optimizer clock, once torch is imported
_OPTS: RunOptions | None = None
_STARTED: list[bool] = []  # start() ran (once per process, whatever its outcome)
_FRAMEWORK_MODULES = {
    "lightning.pytorch.trainer.trainer": "Lightning",
    "pytorch_lightning.trainer.trainer": "Lightning",
    "transformers.trainer": "transformers",
}


def _guarded(part: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - one line; the user's process runs on unprofiled
        say(f"{part} failed ({type(err).__name__}: {err}); this process is not profiled. Training continues.")
        return None


def start() -> None:
    """Called by ``sitecustomize`` once the process has imported torch (at start with --step-function).
    Never raises."""
    text = os.environ.get(ENV)
    if not text or _OPTS is not None or _STARTED:
        return
    _STARTED.append(True)
    _guarded("reading the job's options", _start, text)


def _start(text: str) -> None:
    global _OPTS
    _OPTS = opts = RunOptions.from_env(text)
    if opts.step_function is not None:
        spec = parse_step_function(opts.step_function)
        _wrap_step_function(spec, opts)
    torch = sys.modules.get("torch")
    if torch is not None:  # sitecustomize starts us as torch's module code ends (still "initializing" to importlib)
        _guarded("hooking torch", _on_torch, torch)
    else:
        imports.when_imported("torch", lambda torch: _guarded("hooking torch", _on_torch, torch))
    for name in _FRAMEWORK_MODULES:  # imported before the bootstrap started (sitecustomize reports the later ones)
        module = sys.modules.get(name)
        if module is not None and getattr(module, "Trainer", None) is not None:
            on_framework(name, module)


# ---------------------------------------------------------------------------------------------- torch


def _on_torch(torch: ModuleType) -> None:
    global CLOCK
    assert _OPTS is not None
    if _OPTS.trial is not None and not _OPTS.trial.analyze:  # gpuprof try: the trial's settings and timing, no capture
        from gpuprof.run import trial

        trial.start(torch, _OPTS.trial)
        return
    from gpuprof.capture.checks.loader import dataloader

    dataloader.prepare()  # loaders iterated before the first step are known to the capture that starts later
    if _OPTS.step_function is not None:
        return  # the named function is the clock
    clock = CLOCK = OptimizerClock(_OPTS)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(clock.on_optimizer_step)
    _wrap_destroy_process_group(torch, clock)
    if _OPTS.trial is not None:  # gpuprof try's analysis trial: the capture, then the trial's stop (its report first)
        from gpuprof.run import trial

        trial.start(torch, _OPTS.trial, before_end=clock.finish)


def _wrap_destroy_process_group(torch: ModuleType, clock: OptimizerClock) -> None:
    dist = getattr(torch, "distributed", None)
    original = getattr(dist, "destroy_process_group", None)
    if original is None or getattr(original, "__gpuprof_original__", None) is not None:
        return

    @functools.wraps(original)
    def destroy_process_group(group: Any = None) -> Any:
        if group is None and clock.profiler is not None:
            clock.finish()  # the report first: the end-of-run cross-rank gather needs the process group
        return original(group)

    destroy_process_group.__gpuprof_original__ = original  # type: ignore[attr-defined]
    dist.destroy_process_group = destroy_process_group  # type: ignore[union-attr]


def on_uncaught(exc: BaseException) -> None:
    """An uncaught exception is ending the process (``sitecustomize``'s excepthook): the capture records
    what it tells (a device mismatch explained). Never raises."""
    if CLOCK is not None:
        CLOCK.handle_error(exc)


# ---------------------------------------------------------------------------------------------- frameworks


def on_framework(name: str, module: ModuleType) -> None:
    """A framework's trainer module finished importing (``sitecustomize`` says so): patch its Trainer.
    Never raises."""
    framework = _FRAMEWORK_MODULES.get(name)
    if framework is None or _OPTS is None:
        return
    _guarded(f"attaching gpuprof to {framework}'s Trainer", _patch_trainer, framework, module)


def _patch_trainer(framework: str, module: ModuleType) -> None:
    cls = getattr(module, "Trainer", None)
    original = getattr(cls, "__init__", None)
    if cls is None or original is None or getattr(original, "__gpuprof_original__", None) is not None:
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the constructor
        original(self, *args, **kwargs)
        _guarded(f"attaching gpuprof to {framework}'s Trainer", _attach, framework, self)

    __init__.__gpuprof_original__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def _attach(framework: str, trainer: Any) -> None:
    """Add gpuprof's callback to a Trainer just built, unless the user did; the optimizer clock stands down."""
    assert _OPTS is not None
    if _OPTS.step_function is not None or _OPTS.trial is not None:
        return  # the user named the step: the function clock only; a trial of gpuprof try: no capture
    kwargs: dict[str, Any] = {"run": _OPTS.run, **framework_options(_OPTS)}
    if framework == "Lightning":
        from gpuprof.integrations.lightning import GpuprofCallback as LightningCallback

        callbacks = trainer.callbacks
        if not any(isinstance(c, LightningCallback) for c in callbacks):
            lit = LightningCallback(_OPTS.logdir, **kwargs)
            _quiet(lit.driver)
            callbacks.append(lit)
    else:
        from gpuprof.integrations.transformers import GpuprofCallback as HFCallback

        if not any(isinstance(c, HFCallback) for c in trainer.callback_handler.callbacks):
            hf = HFCallback(_OPTS.logdir, **kwargs)
            _quiet(hf.driver)
            trainer.add_callback(hf)
    if CLOCK is not None:
        CLOCK.stand_down(f"{framework}'s Trainer drives the capture")


def _quiet(driver: Any) -> None:
    """The callback's messages go to each process's gpuprof.log, as the optimizer clock's do (no --verbose):
    nothing of gpuprof's between the job's lines, one end-of-run card after them (docs/run.md)."""
    assert _OPTS is not None
    if _OPTS.verbose:
        return
    from gpuprof.run.runlog import RunLog

    driver.make_stream = lambda prof: RunLog(lambda: prof.out_dir)


# ---------------------------------------------------------------------------------------------- --step-function


def _wrap_step_function(spec: StepFunctionSpec, opts: RunOptions) -> None:
    """Wrap ``spec`` where it is defined: at import of its module, or as the script (``__main__``) defines it.

    The file form (``path/to/train.py:fn``) names the script when the path is the script's, else the module
    imported from that file (under any name sys.path gives it)."""
    if spec.path is not None:
        target = os.path.realpath(spec.path)
        for name in _module_names(target):
            imports.when_imported(name, functools.partial(_wrap_module_from, target, spec, opts))
        _watch_main(spec, opts, main_file=target)
        return
    imports.when_imported(spec.module, lambda module: _guarded(
        f"wrapping --step-function {spec}", _wrap_in, module.__dict__, spec, opts))
    if spec.module == "__main__" or spec.module == _main_module_name():
        _watch_main(spec, opts)


def _wrap_module_from(target: str, spec: StepFunctionSpec, opts: RunOptions, module: ModuleType) -> None:
    file = getattr(module, "__file__", None)
    if isinstance(file, str) and os.path.realpath(file) == target:
        _guarded(f"wrapping --step-function {spec}", _wrap_in, module.__dict__, spec, opts)


def _module_names(path: str) -> list[str]:
    """The dotted names a module imported from ``path`` can have: relative to each sys.path entry, to the
    script's directory and to the working directory, and its bare file name."""
    roots = [os.path.realpath(p or os.curdir) for p in sys.path]
    argv = [str(a) for a in getattr(sys, "orig_argv", [])]
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    if script is not None:
        roots.append(os.path.dirname(os.path.realpath(script)))
    roots.append(os.path.realpath(os.curdir))
    names = {os.path.basename(path)[:-3]}
    for root in roots:
        if path.startswith(root.rstrip(os.sep) + os.sep):
            rel = path[len(root.rstrip(os.sep)) + 1:-3].replace(os.sep, ".")
            rel = rel[:-len(".__init__")] if rel.endswith(".__init__") else rel
            if all(part.isidentifier() for part in rel.split(".")):
                names.add(rel)
    return sorted(n for n in names if n and all(part.isidentifier() for part in n.split(".")))


def _main_module_name() -> str | None:
    """The module name the script would have if imported: ``train`` for ``python train.py``, X for ``-m X``."""
    argv = [str(a) for a in getattr(sys, "orig_argv", [])][1:]
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-m" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("-m") and len(a) > 2:
            return a[2:]
        if a in ("-c",):
            return None
        if a in ("-W", "-X", "-Q"):
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        name = os.path.basename(a)
        return name[:-3] if name.endswith(".py") else name
    return None


def _resolve(namespace: dict[str, Any], attr: str) -> tuple[Any, str] | None:
    """(object holding the last part, last part) of a dotted ``attr`` in ``namespace``; None while absent."""
    parts = attr.split(".")
    if parts[0] not in namespace:
        return None
    holder: Any = None
    obj = namespace[parts[0]]
    for part in parts[1:]:
        holder = obj
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return (holder, parts[-1]) if holder is not None else (namespace, parts[0])


def _wrap_in(namespace: dict[str, Any], spec: StepFunctionSpec, opts: RunOptions) -> bool:
    """Replace the function in place; True once done (or when it is already wrapped)."""
    found = _resolve(namespace, spec.attr)
    if found is None:
        return False
    holder, name = found
    current = holder[name] if isinstance(holder, dict) else getattr(holder, name)
    if getattr(current, "_gpuprof_step_wrapped", False):
        return True
    if not callable(current):
        raise TypeError(f"{spec} is a {type(current).__name__}, not a function")
    wrapped = step_function_wrapper(current, opts)
    wrapped._gpuprof_step_wrapped = True
    if isinstance(holder, dict):
        holder[name] = wrapped
    else:
        setattr(holder, name, wrapped)
    return True


def _watch_main(spec: StepFunctionSpec, opts: RunOptions, main_file: str | None = None) -> None:
    """Wrap the function as soon as the script has defined it (:mod:`gpuprof.run.stepfn` reads where).

    A trace function follows the script's top-level frame, line by line, until a module-level name exists
    (class bodies, decorators and helper calls before it are not traced into); a function defined in a
    function of the script is wrapped in that function's frame, on its first call, once its ``def`` ran.
    Then tracing stops (before the training loop). ``main_file``: the file form's path; a script that is
    another file stops the watch at once (the function is then wrapped when its module is imported).
    """
    from gpuprof.run.stepfn import Located, locate_in_file

    state: dict[str, Any] = {}

    def stop(frame: FrameType | None) -> None:
        sys.settrace(None)
        if frame is not None:
            frame.f_trace = None

    def fail(err: Exception) -> None:
        stop(None)
        say(f"wrapping --step-function {spec} failed ({type(err).__name__}: {err}); nothing is profiled.")

    def on_module_line(frame: FrameType, event: str, arg: Any) -> Any:
        try:
            if _wrap_in(frame.f_globals, spec, opts):
                stop(frame)
                return None
        except Exception as err:  # noqa: BLE001 - one line; stop tracing, the script runs on
            stop(frame)
            fail(err)
            return None
        return on_module_line

    def on_nested_line(frame: FrameType, event: str, arg: Any) -> Any:
        place: Located = state["place"]
        try:
            local = frame.f_locals  # read once: a trace function's writes to this dict reach the frame
            current = local.get(place.inner)
            if current is None or not callable(current):
                return on_nested_line
            if not getattr(current, "_gpuprof_step_wrapped", False):
                wrapped = step_function_wrapper(current, opts)
                wrapped._gpuprof_step_wrapped = True
                local[place.inner] = wrapped
        except Exception as err:  # noqa: BLE001 - one line; stop tracing, the script runs on
            stop(frame)
            fail(err)
            return None
        stop(frame)
        return None

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        code = frame.f_code
        if "place" not in state:
            if code.co_name != "<module>" or frame.f_globals.get("__name__") != "__main__":
                return None
            if main_file is not None and os.path.realpath(code.co_filename) != main_file:
                stop(None)  # the file form names another file: its module is wrapped when imported
                return None
            place = state["place"] = locate_in_file(code.co_filename, spec.attr)
            state["file"] = code.co_filename
            if place.kind == "missing":
                stop(None)
                say(f"--step-function {spec}: {place.problem}; nothing is profiled.")
                return None
            return on_module_line if place.kind == "module" else None
        place = state["place"]
        if (place.kind == "nested" and code.co_filename == state["file"] and code.co_name == place.outer
                and code.co_firstlineno == place.outer_line):
            return on_nested_line
        return None  # a class body, a helper, a library: not traced into

    def guarded_call(frame: FrameType, event: str, arg: Any) -> Any:
        try:
            return on_call(frame, event, arg)
        except Exception as err:  # noqa: BLE001 - one line; stop tracing, the script runs on
            fail(err)
            return None

    sys.settrace(guarded_call)
