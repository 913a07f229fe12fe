"""One trial of ``gpuprof try`` inside the job's process (loaded by the bootstrap once torch is imported).

No capture runs in a trial: no profiler, no report, no window. The trial

* applies its settings (:class:`~gpuprof.run.options.TrialSettings`) without editing the script: the
  arguments of every ``DataLoader`` built, ``torch.set_float32_matmul_precision``,
  ``torch.backends.cudnn.benchmark``, the ``set_to_none`` of ``zero_grad``;
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
import time
import weakref
from types import FrameType, ModuleType
from typing import Any

from gpuprof.run.options import TrialOptions

__all__ = ["start", "TRIAL_RESULT_VERSION"]

TRIAL_RESULT_VERSION = 1
_STATE: list[_Trial] = []


def start(torch: ModuleType, opts: TrialOptions) -> None:
    """Apply the settings and start timing (once per process)."""
    if _STATE:
        return
    trial = _Trial(opts)
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

    # ------------------------------------------------------------------------------------------ settings
    def install(self, torch: ModuleType) -> None:
        import atexit

        self._torch = torch
        s = self.opts.settings
        if s.matmul_precision is not None:
            torch.set_float32_matmul_precision(s.matmul_precision)
            self.applied["matmul_precision"] = s.matmul_precision
        if s.cudnn_benchmark is not None:
            torch.backends.cudnn.benchmark = s.cudnn_benchmark
            self.applied["cudnn_benchmark"] = s.cudnn_benchmark
        if s.zero_grad_set_to_none is not None:
            _force_set_to_none(torch, s.zero_grad_set_to_none)
            self.applied["zero_grad_set_to_none"] = s.zero_grad_set_to_none
        self._patch_dataloader(torch)
        self._patch_backward(torch)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        register_optimizer_step_post_hook(self.on_step)
        atexit.register(self.write, False)

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
        }
        path = self.opts.result
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(doc, fh)
            os.replace(tmp, path)
        except OSError as err:
            sys.stderr.write(f"gpuprof try: writing the trial's result failed: {err}\n")


def _force_set_to_none(torch: ModuleType, value: bool) -> None:
    for cls in (torch.optim.Optimizer, torch.nn.Module):
        original = cls.zero_grad

        def zero_grad(self: Any, set_to_none: bool = True, _original: Any = original) -> Any:
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
