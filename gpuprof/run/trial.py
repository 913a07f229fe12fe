"""One trial of ``gpuprof try`` inside the job's process (loaded by the bootstrap once torch is imported).

No capture runs in a trial: no profiler, no report, no window. The trial

* applies its settings (:class:`~gpuprof.run.options.TrialSettings`) without editing the script: the
  arguments of every ``DataLoader`` built, ``torch.set_float32_matmul_precision``,
  ``torch.backends.cudnn.benchmark``, the ``set_to_none`` of ``zero_grad``, ``foreach``/``fused`` of every torch
  optimizer built, and around the model (each module holding parameters called from outside any module call):
  ``torch.autocast``, ``channels_last`` (the model and its 4-D inputs), ``Module.compile``; it records the
  file:line of the user's code where each was built or called, for the lines to change;
* times the optimizer steps with the step clock's rule (one step per step of the *first* optimizer to step,
  the time between the ends of two such steps, on the host clock), the time spent in DataLoader ``__next__``
  per step, and the loss of each step: the value of the first one-element tensor whose ``.backward()`` is
  called in that step (``torch.autograd.backward`` called directly is not seen);
* at the end of optimizer step ``warmup + steps`` writes its result (JSON) to the file the options name,
  stops the process's DataLoader workers and ends the process at once with exit code 0
  (``os._exit``): the job's own end-of-training work (saving, evaluation, trackers' finish) does not run.

A job that ends earlier writes what it measured at exit, with ``complete`` false. Under torchrun only rank 0
(or a process with no rank) writes the result; every rank stops at the same step.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import sys
import threading
import time
import weakref
from types import FrameType, ModuleType
from typing import Any, Callable

from gpuprof.run.options import TrialOptions

__all__ = ["start", "TRIAL_RESULT_VERSION"]

TRIAL_RESULT_VERSION = 1
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # gpuprof's package
_STATE: list[_Trial] = []


def start(torch: ModuleType, opts: TrialOptions, before_end: Callable[[], Any] | None = None) -> None:
    """Apply the settings and start timing (once per process); ``before_end`` runs at the stop, before the
    process ends (the analysis trial's capture writes its report there)."""
    if _STATE:
        return
    trial = _Trial(opts)
    trial.before_end = before_end
    _STATE.append(trial)
    trial.install(torch)


class _Trial:
    def __init__(self, opts: TrialOptions) -> None:
        self.opts = opts
        self.optimizer_steps = 0
        self.last: float | None = None
        self.step_times_us: list[float] = []
        self.data_wait_us: list[float] = []
        self.losses: list[float | None] = []  # one per optimizer step, from the first
        self._loss: Any = None  # the tensor of this step's first backward
        self._losses_t: list[Any] = []
        self._wait = 0.0
        self._first: weakref.ref[Any] | None = None
        self._done = False
        self._torch: ModuleType | None = None
        self.applied: dict[str, Any] = {}
        self.sites: set[str] = set()  # file:line of the user's code that built a DataLoader the settings changed
        # file:line of the user's code where each other kind of change would be written (the model's call, the
        # optimizer's construction, the zero_grad call), for the lines to change
        self.other_sites: dict[str, set[str]] = {"model": set(), "optimizer": set(), "zero_grad": set()}
        self.notes: list[str] = []  # what the settings could not do (a fused optimizer torch refused...)
        self._torch_dir = ""
        self.before_end: Callable[[], Any] | None = None

    # ------------------------------------------------------------------------------------------ settings
    def install(self, torch: ModuleType) -> None:
        import atexit

        self._torch = torch
        self._torch_dir = os.path.dirname(os.path.abspath(str(torch.__file__))) + os.sep
        s = self.opts.settings
        if s.matmul_precision is not None:
            torch.set_float32_matmul_precision(s.matmul_precision)
            self.applied["matmul_precision"] = s.matmul_precision
        if s.cudnn_benchmark is not None:
            torch.backends.cudnn.benchmark = s.cudnn_benchmark
            self.applied["cudnn_benchmark"] = s.cudnn_benchmark
        if s.zero_grad_set_to_none is not None:
            _force_set_to_none(torch, s.zero_grad_set_to_none, self)
            self.applied["zero_grad_set_to_none"] = s.zero_grad_set_to_none
        if s.optimizer_foreach or s.optimizer_fused:
            self._patch_optimizers(torch)
        if s.autocast is not None or s.channels_last or s.compile:
            self._patch_model(torch)
        self._patch_dataloader(torch)
        self._patch_backward(torch)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self.on_step)
        atexit.register(self.write, False)

    def user_site(self, kind: str, depth: int = 2) -> None:
        """Record the file:line of the first frame outside torch and gpuprof (the user's line) for ``kind``."""
        sites = self.other_sites[kind]
        if len(sites) >= 20:
            return
        with contextlib.suppress(Exception):  # a frame we cannot read: no line to show
            f: FrameType | None = sys._getframe(depth)
            while f is not None and (f.f_code.co_filename.startswith(self._torch_dir)
                                     or f.f_code.co_filename.startswith(_OWN_DIR)):
                f = f.f_back
            if f is not None:
                sites.add(f"{f.f_code.co_filename}:{f.f_lineno}")

    def _patch_optimizers(self, torch: ModuleType) -> None:
        """``foreach=True`` or ``fused=True`` into every torch optimizer built whose constructor takes it. A fused
        optimizer torch refuses (its parameters' device or dtype) is built as the script asked, and said."""
        s = self.opts.settings
        key = "fused" if s.optimizer_fused else "foreach"
        trial = self
        for name in dir(torch.optim):
            cls = getattr(torch.optim, name)
            if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer):
                continue
            original = cls.__dict__.get("__init__")
            if original is None or getattr(original, "__gpuprof_original__", None) is not None:
                continue
            try:
                sig = inspect.signature(original)
            except (TypeError, ValueError):
                continue
            if key not in sig.parameters:
                continue
            setattr(cls, "__init__", _optimizer_init(original, sig, key, trial, name))  # noqa: B010 - a class's

    def _patch_model(self, torch: ModuleType) -> None:
        """The model is each module called from outside any module call that holds parameters (a loss module
        holds none). Its first such call converts it to channels_last and compiles it in place
        (``Module.compile``); each such call converts its 4-D floating inputs and runs under autocast."""
        s = self.opts.settings
        original = torch.nn.Module.__call__
        local = threading.local()
        prepared: weakref.WeakSet[Any] = weakref.WeakSet()
        dtype = torch.bfloat16 if s.autocast == "bf16" else torch.float16
        trial = self
        is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
        memory_format = torch.channels_last

        def to_channels_last(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.dim() == 4 and x.is_floating_point():
                trial.applied["channels_last"] = True
                return x.contiguous(memory_format=memory_format)
            return x

        @functools.wraps(original)
        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807 - replaces Module.__call__
            if is_compiling() or getattr(local, "inside", False):
                return original(self, *args, **kwargs)
            param = next(self.parameters(), None)
            if param is None:  # not a model (a loss module, an activation called on its own)
                return original(self, *args, **kwargs)
            local.inside = True
            try:
                if self not in prepared:
                    prepared.add(self)
                    trial.user_site("model")
                    if s.channels_last and any(p.dim() == 4 for p in self.parameters()):
                        self.to(memory_format=memory_format)
                        trial.applied["channels_last"] = True
                    if s.compile:
                        self.compile()
                        trial.applied["compile"] = True
                if s.channels_last:
                    args = tuple(to_channels_last(a) for a in args)
                    kwargs = {k: to_channels_last(v) for k, v in kwargs.items()}
                if s.autocast is not None:
                    device = param.device.type
                    with torch.autocast(device_type=device, dtype=dtype):
                        out = original(self, *args, **kwargs)
                    trial.applied["autocast"] = s.autocast
                    return out
                return original(self, *args, **kwargs)
            finally:
                local.inside = False

        __call__.__gpuprof_original__ = original  # type: ignore[attr-defined]
        torch.nn.Module.__call__ = __call__

    def _patch_dataloader(self, torch: ModuleType) -> None:
        from torch.utils.data import dataloader as dl

        s = self.opts.settings
        cls = dl.DataLoader
        original = cls.__init__
        sig = inspect.signature(original)
        given = {k: v for k, v in s.given().items()
                 if k in ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor")}
        trial = self
        torch_dir = os.path.dirname(os.path.abspath(str(torch.__file__))) + os.sep

        if given:
            @functools.wraps(original)
            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the constructor
                try:
                    bound = sig.bind(self, *args, **kwargs)
                except TypeError:
                    return original(self, *args, **kwargs)  # torch says what is wrong, as without gpuprof
                a = bound.arguments
                for k, v in given.items():
                    a[k] = v
                if int(a.get("num_workers") or 0) == 0:  # torch refuses these without workers
                    a.pop("persistent_workers", None)
                    a.pop("prefetch_factor", None)
                trial.applied.update({k: a[k] for k in given if k in a})
                with contextlib.suppress(Exception):  # where the user's code built it, for the line to change
                    f: FrameType | None = sys._getframe(1)
                    while f is not None and f.f_code.co_filename.startswith(torch_dir):
                        f = f.f_back
                    if f is not None and len(trial.sites) < 20:
                        trial.sites.add(f"{f.f_code.co_filename}:{f.f_lineno}")
                return original(*bound.args, **bound.kwargs)

            cls.__init__ = __init__  # type: ignore[method-assign]

        it = dl._BaseDataLoaderIter
        nxt = it.__next__

        @functools.wraps(nxt)
        def __next__(self: Any) -> Any:  # noqa: N807
            t0 = time.perf_counter()
            try:
                return nxt(self)
            finally:
                trial._wait += time.perf_counter() - t0

        it.__next__ = __next__  # type: ignore[method-assign]

    def _patch_backward(self, torch: ModuleType) -> None:
        original = torch.Tensor.backward
        trial = self

        @functools.wraps(original)
        def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
            if trial._loss is None:
                with contextlib.suppress(Exception):  # a tensor subclass without numel: no loss for this step
                    if self.numel() == 1:
                        trial._loss = self.detach()
            return original(self, *args, **kwargs)

        torch.Tensor.backward = backward

    # ------------------------------------------------------------------------------------------ the clock
    def on_step(self, optimizer: Any, args: Any = None, kwargs: Any = None) -> None:
        if self._done:
            return
        first = self._first() if self._first is not None else None
        if first is None:
            self._first = weakref.ref(optimizer)
        elif first is not optimizer:
            return
        now = time.perf_counter()
        self.optimizer_steps += 1
        self._losses_t.append(self._loss)
        self._loss = None
        if self.optimizer_steps > self.opts.warmup and self.last is not None:
            self.step_times_us.append((now - self.last) * 1e6)
            self.data_wait_us.append(self._wait * 1e6)
        self._wait = 0.0
        self.last = now
        if self.optimizer_steps >= self.opts.warmup + self.opts.steps:
            self.write(True)
            if self.before_end is not None:
                with contextlib.suppress(Exception):  # the capture guards itself; the stop happens regardless
                    self.before_end()
            _end()

    # ------------------------------------------------------------------------------------------ the result
    def write(self, complete: bool) -> None:
        if self._done:
            return
        self._done = True
        rank = os.environ.get("RANK")
        if rank not in (None, "", "0") or self.optimizer_steps == 0:
            return  # another rank's; or a process that never stepped (a spawned DataLoader worker at its exit)
        import resource

        losses: list[float | None] = []
        for t in self._losses_t:
            try:
                losses.append(None if t is None else float(t.item()))
            except Exception:  # noqa: BLE001 - not a number
                losses.append(None)
        cuda_peak = None
        torch = self._torch
        try:
            if torch is not None and torch.cuda.is_initialized():
                cuda_peak = int(torch.cuda.max_memory_allocated())
        except Exception:  # noqa: BLE001
            cuda_peak = None
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        doc = {
            "trial_result_version": TRIAL_RESULT_VERSION,
            "complete": complete,
            "optimizer_steps": self.optimizer_steps,
            "warmup": self.opts.warmup,
            "step_times_us": self.step_times_us,
            "data_wait_us": self.data_wait_us,
            "losses": losses,
            "host_rss_peak_bytes": int(rss) * (1 if sys.platform == "darwin" else 1024),
            "cuda_peak_bytes": cuda_peak,
            "applied": {k: v for k, v in self.applied.items() if isinstance(v, (bool, int, float, str))},
            "dataloader_sites": sorted(self.sites),
            "sites": {k: sorted(v) for k, v in self.other_sites.items() if v},
            "notes": self.notes[:20],
        }
        path = self.opts.result
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(doc, fh)
            os.replace(tmp, path)
        except OSError as err:
            sys.stderr.write(f"gpuprof try: writing the trial's result failed: {err}\n")


def _optimizer_init(original: Any, sig: inspect.Signature, key: str, trial: _Trial, name: str) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - replaces the constructor
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError:
            original(self, *args, **kwargs)  # torch says what is wrong, as without gpuprof
            return
        bound.arguments[key] = True
        if key == "fused" and "foreach" in sig.parameters:
            bound.arguments["foreach"] = None  # torch refuses both
        trial.user_site("optimizer")
        try:
            original(*bound.args, **bound.kwargs)
        except Exception as err:  # noqa: BLE001 - torch refused it (device, dtype, differentiable): the script's own
            if len(trial.notes) < 20:
                trial.notes.append(f"{name}({key}=True) refused by torch ({type(err).__name__}: {err}); "
                                   "built as the script asked")
            original(self, *args, **kwargs)
            return
        trial.applied[f"optimizer_{key}"] = True

    __init__.__gpuprof_original__ = original  # type: ignore[attr-defined]
    return __init__


def _force_set_to_none(torch: ModuleType, value: bool, trial: _Trial) -> None:
    for cls in (torch.optim.Optimizer, torch.nn.Module):
        original = cls.zero_grad

        def zero_grad(self: Any, set_to_none: bool = True, _original: Any = original) -> Any:
            trial.user_site("zero_grad")
            return _original(self, set_to_none=value)

        functools.update_wrapper(zero_grad, original)
        cls.zero_grad = zero_grad


def _end() -> None:
    """End the process now, exit code 0: workers stopped, output flushed, no atexit, no end-of-training work."""
    with contextlib.suppress(Exception):  # the try command kills the trial's process group after it anyway
        import multiprocessing

        for child in multiprocessing.active_children():
            child.terminate()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed stream: nothing to flush
            stream.flush()
    os._exit(0)
