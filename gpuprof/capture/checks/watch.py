"""The watch over the whole job: what the capture keeps about every step, besides the recorded windows.

A runtime monitor (:class:`WatchCheck`, one of the session's monitors when
``gpuprof.profile(watch=True)``, the default) that costs the training thread
nothing per step: the step clock (``live.step_s``), the time waiting for
batches (``live.fetch_s``, the DataLoader monitor's) and the CUDA allocator's
counters (the memory monitor's per-step sample) are measured already; the
watch adds

* a :class:`~gpuprof.capture.job.sampler.Sampler` thread that reads the CPU use of
  the trainer and of its DataLoader workers, and on a GPU NVML's figures,
  about once a second, off the training thread (joined when the capture stops);
* the steps a framework marked as evaluation (:meth:`WatchCheck.mark_eval`).

Host-to-device copy time is not measured per step: a ``non_blocking`` copy
returns before the copy runs, so timing ``Tensor.to`` on the host would
measure the enqueue, and waiting for the copy would change the training. The
recorded windows' traces hold every copy (``Memcpy HtoD``) with its device
time; report.json's ``job.h2d_copy_us`` is null (docs/run.md).

At the end of a window or of the run, :meth:`WatchCheck.data` copies the
numbers (numpy arrays, on the driving thread); the report's thread turns
them into the job's phases and compact series (:mod:`gpuprof.capture.job.phases`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gpuprof.capture.checks.base import Live, MonitorBase
from gpuprof.capture.job.phases import WatchData, per_step_rss
from gpuprof.capture.job.sampler import Nvml, Sampler, open_nvml
from gpuprof.report import JobSamples

__all__ = ["WatchCheck", "MAX_EVAL_STEPS", "samples_of"]

MAX_EVAL_STEPS = 100_000  # eval marks kept (bounded: one int per evaluation)


class WatchCheck(MonitorBase):
    part = "watch"
    consequence = "no CPU/GPU samples in the job timeline"
    per_step = False  # nothing on the training thread per step: the sampler runs on its own thread

    def __init__(self, interval_s: float | None = None) -> None:
        from gpuprof.capture.job import sampler

        self.interval_s = interval_s if interval_s is not None else sampler.INTERVAL_S
        self.sampler: Sampler | None = None
        self.eval_steps: list[int] = []

    def install(self, live: Live) -> None:
        import threading

        # installed by the thread that drives the steps (the session's start): its run-queue wait is sampled
        self.sampler = Sampler(lambda: live.step_num, self.interval_s, driver_tid=threading.get_native_id())
        self.sampler.start()

    def first_step(self, live: Live) -> None:
        # after the first step the loop's CUDA device is known (asking earlier could create a CUDA context
        # in a job that trains on the CPU); the sampler thread opens NVML for it at its next sample
        if live.cuda and self.sampler is not None:
            opener = _nvml_opener()
            if opener is not None:
                self.sampler.use_nvml(opener)

    def uninstall(self, live: Live) -> None:
        s = self.sampler
        if s is not None:
            err = s.stop()
            if err is not None:
                live.guard.fail(self.part, self.consequence, err)

    def mark_eval(self, live: Live) -> None:
        """The step in progress (the time until the next ``step()``) includes an evaluation."""
        if (not self.eval_steps or self.eval_steps[-1] != live.step_num) and len(self.eval_steps) < MAX_EVAL_STEPS:
            self.eval_steps.append(live.step_num)

    def data(self, live: Live, memory: tuple[Sequence[int], Sequence[int], Sequence[int]] | None,
             loaders_seen: bool, recorded: tuple[int, ...] = (),
             rss: tuple[Sequence[int], Sequence[int]] | None = None) -> WatchData:
        """A copy of the job's numbers (driving thread); ``memory``: CUDA allocated/reserved/peak per step;
        ``rss``: the host RSS samples (their steps, their bytes)."""
        n = len(live.step_s)
        step_s = np.array(live.step_s[:n], dtype=np.float64)
        fetch = np.array(live.fetch_s[:n], dtype=np.float64) if loaders_seen else None
        alloc = res = peak = None
        if memory is not None and len(memory[0]) >= n and any(memory[0]):  # all zero: CUDA present, unused
            alloc, res, peak = (np.array(m[:n], dtype=np.float64) for m in memory)
        from gpuprof.capture.checks.loader.dataloader import available_cores

        return WatchData(step_s=step_s, fetch_s=fetch, eval_steps=tuple(i for i in self.eval_steps if i < n),
                         recorded_steps=recorded, own_steps=tuple(i for i in live.own_steps if i < n),
                         cuda_allocated=alloc, cuda_reserved=res, cuda_peak=peak,
                         samples=self.sampler.snapshot() if self.sampler is not None else None,
                         cores=available_cores(),
                         host_rss=per_step_rss(rss[0], rss[1], n) if rss is not None else None)


def samples_of(live: Live) -> Callable[[], JobSamples] | None:
    """The watch's samples so far, for the TensorBoard scalars (None with ``watch=False``)."""
    watch = live.find(WatchCheck)
    sampler = watch.sampler if watch is not None else None
    return sampler.snapshot if sampler is not None else None


def _nvml_opener() -> Callable[[], Nvml | None] | None:
    """A callable the sampler thread calls to open NVML for the loop's CUDA device; None when CUDA is unused."""
    import torch

    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return None
    index = torch.cuda.current_device()
    bus: str | None = None
    try:
        bus = str(getattr(torch.cuda.get_device_properties(index), "pci_bus_id", "")) or None
    except Exception:  # noqa: BLE001 - no bus id: NVML's index is used
        bus = None

    def opener() -> Nvml | None:
        return open_nvml(bus, index)

    return opener
