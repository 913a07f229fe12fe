"""Memory during capture: per-step samples, leak detection (GP640), CUDA
memory history snapshots and the out-of-memory observer (GP641).

**Per-step memory sample** (taken at each ``step()``): on CUDA, the caching
allocator's ``allocated``, ``reserved`` and peak-allocated bytes of the
current device (peak since the process started; gpuprof never resets the
user's peak counters). Without CUDA, the process's resident set size (RSS)
from ``/proc/self/statm``, at most every ``RSS_INTERVAL_S`` (reading statm
costs ~4 µs in a process with torch loaded: every step, 0.7% of a 0.6 ms
step); on CUDA runs too, beside the allocator's counters. The RSS feeds
TensorBoard, the watch's per-step series (``job.series.host_rss_mib``) and the
host growth check over the whole job (:mod:`gpuprof.capture.checks.memory.hostleak`).

**Memory growth** (GP640): over the samples after ``leak_skip_steps``, the
least-squares slope of memory against step number, in bytes per step. It is
reported when the slope is at least ``leak_min_bytes_per_step``, the total
rise at least ``leak_min_total_bytes``, and at least ``leak_min_rising_share``
of the step-to-step differences are increases (a sawtooth of caching, or one
jump, is not a leak). On CUDA the series is the allocated bytes at every
step (``leak_min_steps`` samples at least). RSS is too coarse for this (the
allocator and shared-memory batches move it), so without CUDA the series is
the CPU allocator's "Total Allocated" at the end of each *recorded* step,
from the trace's ``[memory]`` events (``profile_memory=True``; at least
``leak_trace_min_steps`` steps, total rise at least
``leak_min_bytes_per_step`` per step).
"""

from __future__ import annotations

import os
import time
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gpuprof.capture.config import CheckOptions
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.runtimecodes import runtime_check

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.leaklines import StatementSite

__all__ = ["MemorySampler", "LeakSite", "at_statement", "leak_site", "with_leak_site", "growth_finding", "trace_allocated_series"]

MiB = 1024 * 1024


RSS_INTERVAL_S = 0.05


class MemorySampler:
    """Appends one sample per step to ``allocated``/``reserved``/``peak`` (CUDA), or
    one every ``RSS_INTERVAL_S`` to ``rss`` with its step index in ``rss_steps`` (host)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        # one machine integer per sample, not a Python int and a list slot (36 bytes): the whole-job watch
        # keeps them for every step of a run that may last days
        self.allocated: array[int] = array("q")
        self.reserved: array[int] = array("q")
        self.peak: array[int] = array("q")
        self.rss: array[int] = array("q")
        self.rss_steps: array[int] = array("q")
        self._steps = 0
        self._next_rss = 0.0
        self.available = True
        self._fd: int | None = None
        try:  # the host RSS on CPU and CUDA runs alike (checks.memory.hostleak: host growth over the job)
            self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            self._page = os.sysconf("SC_PAGE_SIZE")
        except (OSError, AttributeError, ValueError):
            self._fd = None
        if cuda:
            import torch

            self._stats = torch.cuda.memory_stats_as_nested_dict  # no flattening: cheap per step
            self.sample: Callable[[], None] = self._sample_cuda
        elif self._fd is not None:
            self.sample = self._sample_rss
        else:
            self.available = False
            self.sample = _noop

    @property
    def kind(self) -> str:
        return "cuda" if self.cuda else "host_rss"

    def series(self) -> array[int]:
        """The series the leak detector reads."""
        return self.allocated if self.cuda else self.rss

    def _sample_cuda(self) -> None:
        if self._fd is not None:
            self._sample_rss()
        s = self._stats()
        if not s:  # CUDA not initialised yet: nothing allocated
            self.allocated.append(0)
            self.reserved.append(0)
            self.peak.append(0)
            return
        self.allocated.append(s["allocated_bytes"]["all"]["current"])
        self.reserved.append(s["reserved_bytes"]["all"]["current"])
        self.peak.append(s["allocated_bytes"]["all"]["peak"])

    def _sample_rss(self) -> None:
        step = self._steps
        self._steps = step + 1
        now = time.perf_counter()
        if now < self._next_rss:
            return
        self._next_rss = now + RSS_INTERVAL_S
        raw = os.pread(self._fd, 128, 0)  # type: ignore[arg-type]
        self.rss.append(int(raw.split()[1]) * self._page)
        self.rss_steps.append(step)

    def rss_by_step(self) -> dict[int, int]:
        """The host RSS samples, by step index."""
        return dict(zip(self.rss_steps, self.rss))

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None


def _noop() -> None:
    return None


def growth_finding(series: Sequence[int], kind: str, options: CheckOptions,
                   location: SourceLocation | None = None) -> Finding | None:
    """GP640 when ``series`` (one sample per step) rises steadily (see the module docstring).

    ``kind``: ``cuda`` (every step's allocated bytes) or ``cpu_trace`` (recorded steps, from the trace).
    ``location`` is the capture's (the loop); :func:`with_leak_site` points the finding at the
    allocating line once the traces have told it (:func:`leak_site`).
    """
    if kind == "cpu_trace":
        samples: Sequence[int] = list(series)
        min_steps = options.leak_trace_min_steps
        min_total = options.leak_min_bytes_per_step * max(len(samples) - 1, 1)
    else:
        samples = series[options.leak_skip_steps:]
        min_steps = options.leak_min_steps
        min_total = options.leak_min_total_bytes
    n = len(samples)
    if n < max(min_steps, 2):
        return None
    xs = range(n)
    mx = (n - 1) / 2
    my = sum(samples) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, samples)) / sxx
    diffs = [b - a for a, b in zip(samples, samples[1:])]
    rising = sum(1 for d in diffs if d > 0) / len(diffs)
    total = samples[-1] - samples[0]
    if slope < options.leak_min_bytes_per_step or total < min_total:
        return None
    if rising < options.leak_min_rising_share:
        return None
    what = "allocated CUDA memory" if kind == "cuda" else "allocated CPU memory (recorded steps)"
    c = runtime_check("GP640")
    return Finding(
        code=c.code, name=c.name, severity=c.severity,
        message=f"{what} grows by {slope / MiB:.2f} MiB per step ({total / MiB:.1f} MiB over {n} steps, "
                f"{rising:.0%} of steps rising): something keeps a reference to every step's tensors",
        advice="Look for tensors kept across steps: `total_loss += loss` keeps every step's autograd graph "
               "alive (use `loss.item()` or `loss.detach()`), lists of outputs/losses appended each step, "
               "or caches keyed by step. `gpuprof memory` on the dumped snapshot shows who holds the memory.",
        evidence=(Evidence("growth_bytes_per_step", round(slope), options.leak_min_bytes_per_step, "bytes",
                           extra={"growth_kind": "steady",  # a one-time jump never gets here (rising share)
                                  "samples": n, "total_growth_bytes": total, "rising_share": round(rising, 3),
                                  "series": kind, "first_bytes": samples[0], "last_bytes": samples[-1]}),),
        location=location,
        origin="runtime",
    )


@dataclass(frozen=True)
class LeakSite:
    """The user line whose allocations stay alive, step after step, in a recorded trace.

    ``kept_bytes``: bytes allocated there during the recorded steps and never
    freed before the trace ended; ``steps``: in how many recorded steps such
    an allocation was made (of ``recorded_steps``).
    """

    location: SourceLocation
    kept_bytes: int
    steps: int
    recorded_steps: int
    # set once the statement is known (:func:`at_statement`): ``location`` is then that statement's line and
    # this the function's first line; None: ``location`` is the function's first line (the trace's frames)
    def_line: int | None = None

    def describe(self) -> str:
        fn = f"{self.location.function}()" if self.location.function else "the code"
        kept = (f"never freed: {self.kept_bytes / MiB:.2f} MiB kept from {self.steps} of {self.recorded_steps} "
                "recorded steps")
        if self.def_line is not None:
            return f"allocated at {self.location}, a statement of {fn}, and {kept}"
        return (f"allocated in {fn} and {kept}; {self.location} is the function's first line (the statement "
                "inside it is not known: the allocation came from an operator it runs directly, or the "
                "capture ran without with_stack/profile_memory)")

    def evidence(self) -> Evidence:
        extra: dict[str, object] = {"site": str(self.location), "steps_with_kept_allocations": self.steps,
                                    "recorded_steps": self.recorded_steps, "statement": self.def_line is not None}
        if self.def_line is not None:
            extra["function_first_line"] = self.def_line
        return Evidence("leak_site_kept_bytes", self.kept_bytes, None, "bytes", extra=extra)


def at_statement(site: LeakSite, statements: tuple[StatementSite, ...], device: str) -> LeakSite:
    """``site`` (a function, from a trace file) pointed at the statement inside it that allocated what stays,
    when the live profiler told it (:mod:`gpuprof.capture.leaklines`); else ``site`` unchanged."""
    from dataclasses import replace

    from gpuprof.capture.leaklines import refine

    loc = site.location
    best = refine(statements, device, loc.file, loc.function or "", loc.line)
    if best is None or best.line is None:
        return site
    return replace(site, location=SourceLocation(loc.file, best.line, loc.function), def_line=loc.line)


def leak_site(trace: Any, device_type: int = 0) -> LeakSite | None:
    """Where the memory that grows was allocated, from a loaded trace's ``[memory]`` events.

    Matches each free with its allocation by address
    (:func:`gpuprof.memory.tracemem.memory_from_trace`); of the allocations
    made inside a recorded step and still alive when the trace ends, groups
    them by allocation site (the innermost user frame, ``with_stack=True``)
    and returns the site kept from the most steps (then the most bytes). A
    leak allocates at the same line every step; memory kept from one step
    only (the last step's activations, a cache filled once) is not a leak
    site. None when no site is kept from two steps or more, when the trace
    has no addresses or no Python frames naming a user line.

    The site is a function: a trace's Python frames (``file.py(LINE): name``)
    give the line where the function starts, not the line inside it that
    allocated; :func:`at_statement` then names the statement, from what the
    live profiler recorded at the window's end (:mod:`gpuprof.capture.leaklines`).
    """
    from bisect import bisect_right

    from gpuprof.memory.model import ALLOC, FREE_COMPLETED
    from gpuprof.memory.tracemem import memory_from_trace

    if not trace.memory:
        return None
    data = memory_from_trace(trace)
    want = "cpu" if device_type == 0 else "cuda"
    devs = [d for d in data.devices if d.device.split(":")[0] == want and d.has_addresses]
    steps = sorted(data.steps, key=lambda s: s[1])
    if not devs or len(steps) < 2:
        return None
    starts = [s[1] for s in steps]
    live: dict[int, tuple[int, int, int]] = {}  # address -> (site id, bytes, step index)
    for dm in devs:
        for t, act, addr, size, sid in zip(dm.time, dm.action, dm.addr, dm.size, dm.site):
            if act == ALLOC:
                i = bisect_right(starts, t) - 1
                if i >= 0 and t <= steps[i][2]:
                    live[addr] = (sid, size, i)
                else:
                    live.pop(addr, None)  # outside the steps: not counted, but a reused address is no longer ours
            elif act == FREE_COMPLETED:
                live.pop(addr, None)
    per_site: dict[int, tuple[int, set[int]]] = {}
    for sid, size, i in live.values():
        kept, seen = per_site.setdefault(sid, (0, set()))
        seen.add(i)
        per_site[sid] = (kept + size, seen)
    best = None
    for sid, (kept, seen) in per_site.items():
        site = data.sites.sites[sid]
        if not site.file or site.line is None or len(seen) < 2:
            continue
        key = (len(seen), kept)
        if best is None or key > best[0]:
            best = (key, site)
    if best is None:
        return None
    (nsteps, kept), site = best
    return LeakSite(SourceLocation(site.file, site.line, site.function), kept, nsteps, len(steps))


def with_leak_site(f: Finding, site: LeakSite) -> Finding:
    """The GP640 finding ``f`` pointing at the allocating line ``site``, which its message names."""
    from dataclasses import replace

    return replace(f, message=f"{f.message}; {site.describe()}", location=site.location,
                   evidence=f.evidence + (site.evidence(),))


def trace_allocated_series(trace: Any, device_type: int = 0, metrics: Any = None) -> list[tuple[int, int]]:
    """(ProfilerStep id, allocator "Total Allocated" at the step's end) for one device type
    (0 = CPU), from a loaded trace recorded with ``profile_memory=True`` (``metrics``: its
    :class:`~gpuprof.trace.metrics.TraceMetrics` when computed already). No torch needed."""
    from gpuprof.trace.metrics import compute_metrics
    from gpuprof.trace.model import memory_totals

    m = metrics if metrics is not None else compute_metrics(trace)
    if not m.has_step_markers:
        return []
    events = [(e.ts, totals[0]) for e in trace.memory if e.stream == device_type
              for totals in (memory_totals(e),) if totals is not None]
    out: list[tuple[int, int]] = []
    j = 0
    last: int | None = None
    for st in m.steps:
        while j < len(events) and events[j][0] <= st.end:
            last = events[j][1]
            j += 1
        if last is not None:
            out.append((st.id, last))
    return out
