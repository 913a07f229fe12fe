"""Memory (GP640, GP641): per-step samples, CUDA history around recorded steps, the OOM snapshot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprof.capture.checks.base import Live, MonitorBase
from gpuprof.capture.checks.memory.hostleak import CHECK_EVERY, Census, CensusResult, host_growth, host_growth_finding
from gpuprof.capture.guard import safe_text
from gpuprof.capture.memory import MemorySampler, growth_finding
from gpuprof.capture.owners import OwnerRegistry
from gpuprof.findings import Finding

if TYPE_CHECKING:  # pragma: no cover - annotations only
    # the CUDA parts (history, OOM observer and forensics, the snapshot readers: ~9 ms of CPU to import) are
    # imported where they start: a run without CUDA never loads them
    from gpuprof.capture.oom import HistoryRecorder, OOMObserver

CENSUS = "host memory census"  # the guard's name for the census of live tensors when the host memory grows
SAMPLING = "memory sampling"
WINDOW_BEFORE_STEPS = 2  # steps before a recorded window left out too (the profiler starts in its warm-up)
WINDOW_AFTER_STEPS = 3  # steps after a recorded window left out of the host growth check (its trace written)  # the guard's name for the per-step samples (the history and OOM parts have theirs)


class MemoryCheck(MonitorBase):
    part = "memory monitor"
    consequence = "no memory numbers, snapshots or memory findings"
    per_step = True  # one sample a step (a pread of /proc/self/statm at most every few ms, or CUDA's counters)

    def __init__(self) -> None:
        self.sampler: MemorySampler | None = None
        self.history: HistoryRecorder | None = None
        self.oom: OOMObserver | None = None
        self.forensics = False  # the OOM-forensics history ring is on (ours to turn off)
        self.owners: OwnerRegistry | None = None  # parameters/gradients/optimizer state, named in OOM dumps
        # host growth (gpuprof.capture.checks.memory.hostleak): the live check's next look, the census it started and
        # its result
        self._next_check = 0
        self.census: Census | None = None
        self.census_result: CensusResult | None = None
        self.windows: list[tuple[int, int]] = []  # [start, end) steps recorded (+ QUIET after): not the job's RSS

    def install(self, live: Live) -> None:
        g, cfg = live.guard, live.config
        self.sampler = g.run(SAMPLING, "no per-step memory numbers", MemorySampler, live.cuda)
        if self.sampler is not None and not self.sampler.available:
            # not Linux (macOS, Windows): the RSS only fed TensorBoard and the report; the CPU growth check reads the trace
            g.note("no /proc/self/statm on this system: the process's resident memory (RSS) is not sampled")
            self.sampler = None
        if not live.cuda:
            g.note("no CUDA: memory history snapshots, the out-of-memory observer and the host-sync "
                   "locator are off; memory growth is checked on the host's resident memory of every step "
                   "and the recorded steps' allocations")
            return
        from gpuprof.capture.oom import HistoryRecorder, OOMObserver, start_forensics

        paths = live.paths
        resume = None
        if cfg.oom_forensics and cfg.oom_observer and paths is not None:
            ring = cfg.oom_history_max_entries
            if g.run("OOM forensics", "no allocation history in an OOM snapshot", start_forensics, ring):
                self.forensics = True

                def resume() -> None:  # after a recorded window: back to the ring, not off
                    start_forensics(ring)
        if cfg.memory_history and paths is not None:
            self.history = HistoryRecorder(cfg.memory_history_max_entries, resume)
        if cfg.oom_observer and paths is not None:
            reg = OwnerRegistry(cfg.models)
            if g.run("OOM forensics", "the OOM verdict names parameters and optimizer state by stacks only",
                     reg.install):
                self.owners = reg
            self.oom = OOMObserver(paths.oom_files, live.stream,  # usable from the exception path in any case
                                   owners=self.owners.owners if self.owners is not None else None)
            if not g.run("out-of-memory observer", "no snapshot at an OOM", self.oom.attach):
                g.note("this torch has no out-of-memory observer: the OOM snapshot is dumped when "
                       "the error leaves the step")

    def step(self, live: Live) -> None:
        if self.sampler is not None:
            try:
                self.sampler.sample()
            except Exception as err:  # noqa: BLE001 - no further samples; the history and OOM parts go on
                self.sampler = None
                live.guard.fail(SAMPLING, "no per-step memory numbers", err)
                return
            s = self.sampler
            if self.census is not None and self.census.due(live.step_num):
                c, self.census = self.census, None
                live.monitor_own_until = live.step_num + 1  # the step after it: own_work (module docstring)
                self.census_result = live.guard.run(CENSUS, "the host-growth finding names no holder", c.finish,
                                                    live.step_num)
            elif (len(s.rss) >= self._next_check and self.census_result is None and self.census is None
                  and live.config.checks):
                self._next_check = len(s.rss) + max(CHECK_EVERY, len(s.rss) // 8)  # every ~1 s, sparser in long jobs
                if host_growth(s.rss_steps, s.rss, live.config.options, self.windows) is not None:
                    live.monitor_own_until = live.step_num + 1
                    self.census = live.guard.run(CENSUS, "the host-growth finding names no holder", Census,
                                                 live.step_num)
                    if self.census is None:
                        self._next_check = 1 << 62  # failed once: not again

    def recording(self, live: Live, on: bool, span: int | None) -> None:
        if on:
            self.windows.append((max(live.step_num - WINDOW_BEFORE_STEPS, 0), 1 << 62))  # the profiler's warm-up
        elif self.windows:  # the steps after a window, while its trace is written, are gpuprof's too
            self.windows[-1] = (self.windows[-1][0], live.step_num + WINDOW_AFTER_STEPS)
        h = self.history
        if h is None:
            return
        if on and not h.recording:
            live.guard.run("memory history", "no memory snapshot beside the trace", h.start)
        elif not on and h.recording and live.paths is not None and span is not None:
            live.guard.run("memory history", "no memory snapshot beside the trace", h.dump,
                           live.paths.snapshot_file(span))

    def uninstall(self, live: Live) -> None:
        if self.history is not None and self.history.recording:
            live.guard.run("memory history", "none", self.history.stop)
        if self.owners is not None:
            live.guard.run("OOM forensics", "none", self.owners.uninstall)
        if self.forensics:
            from gpuprof.capture.oom import stop_forensics

            self.forensics = False
            live.guard.run("OOM forensics", "none", stop_forensics)
        if self.oom is not None:
            self.oom.active = False
        if self.sampler is not None:
            live.guard.run(SAMPLING, "none", self.sampler.close)

    def findings(self, live: Live) -> list[Finding]:
        s = self.sampler
        if s is None:
            return []
        out = []
        if s.cuda:
            g = growth_finding(s.allocated, "cuda", live.config.options, live.location)
            if g is not None:
                out.append(g)
        host = host_growth(s.rss_steps, s.rss, live.config.options, self.windows)
        if host is not None:
            out.append(host_growth_finding(host, self.census_result, live.location))
        return out

    def on_oom(self, live: Live, exc: BaseException) -> Finding:
        """The run hit CUDA out-of-memory: dump a snapshot now (unless the observer did) and say where."""
        from gpuprof.capture.oom import oom_finding, oom_message_facts

        text = safe_text(exc, 2000)
        if self.oom is None:
            return oom_finding([], text)
        if not self.oom.dumped and live.paths is not None:
            # no observer ran (older torch): the verdict takes the request and free bytes from the message
            self.oom.dump(extra={"exception": text, **oom_message_facts(text)})
        return oom_finding(list(self.oom.dumped), text)

    def snapshots(self) -> list[str]:
        """The memory snapshots written beside the traces so far."""
        return [str(s) for s in (self.history.snapshots if self.history else [])]

    def oom_files(self) -> list[str]:
        """The out-of-memory snapshots and statistics written so far."""
        return [str(x) for pair in (self.oom.dumped if self.oom else []) for x in pair]

    def files(self) -> list[str]:
        return self.snapshots() + self.oom_files()
