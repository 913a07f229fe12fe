"""What a capture records and the thresholds its runtime checks use.

Everything has a default that suits a training loop; every default can be
overridden through :func:`gpuprof.profile` / :func:`gpuprof.profile_step`.
Thresholds live in :class:`CheckOptions` (never inlined in the checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["Schedule", "CheckOptions", "CaptureConfig", "DEFAULT_LOGDIR"]

DEFAULT_LOGDIR = "gpuprof_logs"


@dataclass(frozen=True)
class Schedule:
    """Which steps are traced: ``skip_first`` + ``wait`` steps are not, then
    ``warmup`` steps run the profiler without keeping events (its start-up cost
    stays out of the trace), then ``active`` steps are recorded into one trace
    file. The cycle repeats ``repeat`` times (0: until the loop ends).

    The default skips the first 5 steps (CUDA context, cuDNN autotuning, the
    caching allocator and DataLoader workers warming up), warms up for 2 and
    records 5. It is the same as ``torch.profiler.schedule`` with these
    arguments; a ``torch.profiler.schedule(...)`` callable is accepted instead.
    """

    wait: int = 5
    warmup: int = 2
    active: int = 5
    repeat: int = 1
    skip_first: int = 0

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active <= 0 or self.repeat < 0 or self.skip_first < 0:
            raise ValueError(
                f"invalid schedule {self}: wait, warmup, repeat and skip_first must be >= 0 and active > 0"
            )

    def to_torch(self) -> Callable[[int], Any]:
        """The equivalent ``torch.profiler.schedule`` callable."""
        import torch.profiler
        import warnings

        with warnings.catch_warnings():
            # torch warns when warmup=0; that is the user's explicit choice here
            warnings.simplefilter("ignore", UserWarning)
            return torch.profiler.schedule(
                wait=self.wait,
                warmup=self.warmup,
                active=self.active,
                repeat=self.repeat,
                skip_first=self.skip_first,
            )

    def describe(self) -> str:
        first = self.skip_first + self.wait + self.warmup
        return f"steps {first}-{first + self.active - 1} recorded" + (
            "" if self.repeat == 1 else f", cycle of {self.wait + self.warmup + self.active} repeated "
            + ("until the end" if self.repeat == 0 else f"{self.repeat} times")
        )


@dataclass(frozen=True)
class CheckOptions:
    """Thresholds of the runtime checks (GP6xx). Units are in the names."""

    # GP601: num_workers=0 is a warning at or above this data-loading share, info below
    dataloader_share_warning: float = 0.10
    # GP601: below this share the finding is not raised at all
    dataloader_min_share: float = 0.02
    # GP604: epochs seen in the run before persistent_workers=False is reported
    persistent_workers_min_epochs: int = 3
    # GP612/GP610: modules inspected during the first step (bounded cost on huge models)
    placement_max_modules: int = 4096
    # GP620: batches whose shapes are compared to call the input shapes stable
    stable_shape_batches: int = 8
    # GP630: a source line must sync at least this often per recorded step
    sync_min_per_step: float = 1.0
    # GP640: steps at the start of the run ignored by the leak detector (warm-up allocations)
    leak_skip_steps: int = 3
    # GP640: fewest per-step samples the leak detector needs (CUDA: every step)
    leak_min_steps: int = 8
    # GP640: fewest recorded steps when the series comes from the trace (no CUDA)
    leak_trace_min_steps: int = 3
    # GP640: fraction of step-to-step changes that must be increases
    leak_min_rising_share: float = 0.7
    # GP640: minimum growth per step (bytes) to call it a leak
    leak_min_bytes_per_step: int = 64 * 1024
    # GP640: minimum total growth over the samples (bytes)
    leak_min_total_bytes: int = 2 * 1024 * 1024
    # GP803: compile time after step 0, as a share of all step time, from which it is reported
    compile_min_share: float = 0.01


@dataclass
class CaptureConfig:
    """Everything :func:`gpuprof.profile` accepts, with its defaults.

    * ``activities``: ``None`` = CPU, plus CUDA when CUDA is available.
    * ``record_shapes``/``with_stack``/``profile_memory``/``with_flops``: as in
      ``torch.profiler.profile``; shapes, stacks and memory are on by default.
    * ``memory_history``: record CUDA allocator history during recorded steps
      and dump a snapshot beside each trace (CUDA only).
    * ``oom_observer``: dump a snapshot and ``memory_stats()`` when CUDA runs
      out of memory (CUDA only).
    * ``sync_debug``: locate host syncs with ``torch.cuda.set_sync_debug_mode("warn")``
      during recorded steps (CUDA only).
    * ``checks``: run the runtime checks (GP6xx); ``select``/``ignore`` filter codes.
    * ``tensorboard``: write per-step scalars and the findings as TensorBoard events.
    * ``analyze``: run the trace analyzer at the end and write report.json/report.md.
    * ``print_report``: print the short end-of-run report (to ``stderr``).
    * ``models``: modules to check for placement before the first step (others
      are found when they are first called).
    * ``flush_every``: buffered per-step scalars are written every this many steps.
    """

    logdir: str = DEFAULT_LOGDIR
    run: str | None = None
    schedule: Schedule | Callable[[int], Any] = field(default_factory=Schedule)
    activities: Sequence[Any] | None = None
    record_shapes: bool = True
    with_stack: bool = True
    profile_memory: bool = True
    with_flops: bool = False
    with_modules: bool = False
    memory_history: bool = True
    memory_history_max_entries: int = 100_000
    oom_observer: bool = True
    sync_debug: bool = True
    checks: bool = True
    select: Sequence[str] = ()
    ignore: Sequence[str] = ()
    tensorboard: bool = True
    analyze: bool = True
    print_report: bool = True
    models: Sequence[Any] = ()
    flush_every: int = 500
    options: CheckOptions = field(default_factory=CheckOptions)

    def __post_init__(self) -> None:
        self.logdir = os.fspath(self.logdir)
        if self.flush_every < 1:
            raise ValueError("flush_every must be >= 1")
