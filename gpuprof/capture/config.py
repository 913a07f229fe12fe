"""What a capture records and the thresholds its runtime checks use.

Everything has a default that suits a training loop; every default can be
overridden through :func:`gpuprof.profile` / :func:`gpuprof.profile_step`.
Thresholds live in :class:`CheckOptions` (never inlined in the checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from gpuprof.codespec import option_default, replace_fields
from gpuprof.runtimecodes import RUNTIME_CHECKS

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
        import warnings

        import torch.profiler

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


def _d(name: str) -> Any:
    return option_default(RUNTIME_CHECKS, name)


@dataclass(frozen=True)
class CheckOptions:
    """Thresholds of the runtime checks (GP6xx). Units are in the names.

    Each field is an option of a runtime check, declared (default and
    meaning) in :data:`gpuprof.runtimecodes.RUNTIME_CHECKS`;
    ``gpuprof.profile(options={"GP640.leak_min_steps": 12})`` sets it.
    """

    dataloader_share_warning: float = _d("dataloader_share_warning")  # GP601
    dataloader_min_share: float = _d("dataloader_min_share")  # GP601
    persistent_workers_min_epochs: int = _d("persistent_workers_min_epochs")  # GP604
    loader_wait_share: float = _d("loader_wait_share")  # GP605-GP607
    worker_busy_pct: float = _d("worker_busy_pct")  # GP605, GP607
    worker_idle_pct: float = _d("worker_idle_pct")  # GP606
    loader_min_samples: int = _d("loader_min_samples")  # GP605-GP607
    loader_read_kib_per_sample: float = _d("loader_read_kib_per_sample")  # GP606
    loader_io_wait_pct: float = _d("loader_io_wait_pct")  # GP606
    loader_blocked_wakeups_per_sample: float = _d("loader_blocked_wakeups_per_sample")  # GP606
    placement_max_modules: int = _d("placement_max_modules")  # GP610, GP612
    stable_shape_batches: int = _d("stable_shape_batches")  # GP620
    sync_min_per_step: float = _d("sync_min_per_step")  # GP630
    leak_skip_steps: int = _d("leak_skip_steps")  # GP640
    leak_min_steps: int = _d("leak_min_steps")  # GP640
    leak_trace_min_steps: int = _d("leak_trace_min_steps")  # GP640
    leak_min_rising_share: float = _d("leak_min_rising_share")  # GP640
    leak_min_bytes_per_step: int = _d("leak_min_bytes_per_step")  # GP640
    leak_min_total_bytes: int = _d("leak_min_total_bytes")  # GP640
    compile_min_share: float = _d("compile_min_share")  # GP803
    anomaly_factor: float = _d("anomaly_factor")  # GP650
    anomaly_steps: int = _d("anomaly_steps")  # GP650
    anomaly_min_ms: float = _d("anomaly_min_ms")  # GP650

    def with_options(self, options: Mapping[str, Mapping[str, Any]]) -> "CheckOptions":
        """A copy with the parsed option values of the runtime checks set (other codes' ignored)."""
        mine = {c.code for c in RUNTIME_CHECKS}
        values: dict[str, Any] = {}
        for code, vals in options.items():
            if code in mine:
                values.update(vals)
        return replace_fields(self, values)


@dataclass
class CaptureConfig:
    """Everything :func:`gpuprof.profile` accepts, with its defaults.

    * ``activities``: ``None`` = CPU, plus CUDA when CUDA is available.
    * ``record_shapes``/``with_stack``/``profile_memory``/``with_flops``: as in
      ``torch.profiler.profile``; shapes, stacks and memory are on by default.
    * ``memory_history``: record CUDA allocator history during recorded steps
      and dump a snapshot beside each trace (CUDA only).
    * ``oom_observer``: at a CUDA out-of-memory error, write the snapshot
      ``oom.pickle`` and the verdict ``oom.json``/``oom.md`` next to the report
      (CUDA only).
    * ``oom_forensics``: keep allocator history in a ring of
      ``oom_history_max_entries`` entries from the start (Python stacks of
      allocations), so the OOM snapshot says what filled the device (CUDA only;
      ``False`` turns it off).
    * ``sync_debug``: locate host syncs with ``torch.cuda.set_sync_debug_mode("warn")``
      during recorded steps (CUDA only).
    * ``checks``: run the runtime checks (GP6xx); ``select``/``ignore`` filter codes.
    * ``tensorboard``: write per-step scalars and the findings as TensorBoard events.
    * ``analyze``: run the trace analyzer at the end and write report.json/report.md.
    * ``print_report``: print the short end-of-run report (to ``stderr``).
    * ``models``: modules to check for placement before the first step (others
      are found when they are first called).
    * ``watch``: watch the whole job (docs/run.md, "The watch"): the job's phases and per-step
      series in report.json's ``job``, CPU use of the trainer and its DataLoader workers (and NVML
      on a GPU) sampled about once a second by a daemon thread.
    * ``flush_every``: buffered per-step scalars are written every this many steps.
    * ``options``: thresholds, as :class:`CheckOptions` or as a mapping
      ``{"CODE.NAME": value}`` of any runtime check's or trace rule's options
      (``{"GP640.leak_min_steps": 12, "GP101.min_utilization": 0.6}``), checked
      against the registry (:func:`gpuprof.codes.parse_options`); the trace
      rules' ones end up in ``rule_options`` for the end-of-run analysis.
    * ``select``/``ignore`` accept codes, prefixes and names (current or former).
    * ``hang_timeout``: seconds without a finished step after which the hang
      watchdog writes ``hang.md``/``hang.json`` (GP651); ``None`` = max(300 s,
      20 x the median step), ``0`` = no watchdog (docs/run.md).
    * ``max_auto_windows``: windows recorded automatically when the steady
      state breaks (GP650), at most this many per job; ``0`` = none.
    * ``trigger``: register the capture for ``gpuprof trigger PID`` (and
      ``SIGUSR2`` where it has its default action).
    * ``to``: experiment trackers the end-of-run report is sent to (``("wandb", "mlflow")``, or
      ``"wandb,mlflow"``; docs/trackers.md), from rank 0 only; an unknown name is a ValueError here.
      ``tracker_runs`` remembers the MLflow run active when the capture is made, for the end of the run.
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
    oom_forensics: bool = True
    oom_history_max_entries: int = 20_000  # gpuprof.capture.oom.FORENSICS_MAX_ENTRIES
    sync_debug: bool = True
    checks: bool = True
    select: Sequence[str] = ()
    ignore: Sequence[str] = ()
    tensorboard: bool = True
    analyze: bool = True
    print_report: bool = True
    models: Sequence[Any] = ()
    flush_every: int = 500
    watch: bool = True
    options: CheckOptions = field(default_factory=CheckOptions)
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # code -> {option: value}
    hang_timeout: float | None = None
    max_auto_windows: int = 2  # gpuprof.capture.job.windows.DEFAULT_MAX_AUTO_WINDOWS
    trigger: bool = True
    to: Sequence[str] = ()
    # tracker -> the id of its run active when the capture was made (gpuprof.trackers.active_runs)
    tracker_runs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.logdir = os.fspath(self.logdir)
        from gpuprof.trackers import active_runs, parse_targets

        self.to = parse_targets(self.to)
        if self.to and not self.tracker_runs:
            self.tracker_runs = active_runs(self.to)
        if isinstance(self.options, Mapping):
            from gpuprof.codes import get_spec, parse_options

            parsed = parse_options(self.options, origins=("runtime", "trace", "distributed"), where="capture")
            self.options = CheckOptions().with_options(parsed)
            self.rule_options = {**self.rule_options, **{
                code: vals for code, vals in parsed.items() if (spec := get_spec(code)) and spec.origin == "trace"}}
        elif not isinstance(self.options, CheckOptions):
            raise ValueError(f"options must be a CheckOptions or a mapping {{'CODE.NAME': value}}, got "
                             f"{type(self.options).__name__}")
        if self.select or self.ignore:
            from gpuprof.codes import resolve_selectors

            self.select = tuple(resolve_selectors(self.select))
            self.ignore = tuple(resolve_selectors(self.ignore))
        if self.flush_every < 1:
            raise ValueError("flush_every must be >= 1")
        if self.hang_timeout is not None and not (isinstance(self.hang_timeout, (int, float))
                                                  and 0 <= self.hang_timeout < float("inf")):
            raise ValueError(f"hang_timeout must be a number of seconds >= 0 (0: off) or None, got "
                             f"{self.hang_timeout!r}")
        if isinstance(self.max_auto_windows, bool) or not isinstance(self.max_auto_windows, int) \
                or self.max_auto_windows < 0:
            raise ValueError(f"max_auto_windows must be an int >= 0, got {self.max_auto_windows!r}")
