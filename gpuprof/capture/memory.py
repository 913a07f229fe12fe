"""Memory during capture: per-step samples, leak detection (GP640), CUDA
memory history snapshots and the out-of-memory observer (GP641).

**Per-step memory sample** (taken at each ``step()``): on CUDA, the caching
allocator's ``allocated``, ``reserved`` and peak-allocated bytes of the
current device (peak since the process started; gpuprof never resets the
user's peak counters). Without CUDA, the process's resident set size (RSS)
from ``/proc/self/statm``, at most every ``RSS_INTERVAL_S`` (reading statm
costs ~4 µs in a process with torch loaded: every step, 0.7% of a 0.6 ms
step). The RSS only feeds TensorBoard and the report's first/last figures;
the CPU leak check reads the trace (below).

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

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gpuprof.atomic import atomic_write
from gpuprof.capture.config import CheckOptions
from gpuprof.findings import Evidence, Finding, SourceLocation
from gpuprof.memory.snapshot import dump_snapshot
from gpuprof.runtimecodes import runtime_check

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from gpuprof.capture.leaklines import StatementSite

__all__ = ["MemorySampler", "LeakSite", "at_statement", "leak_site", "with_leak_site", "growth_finding", "trace_allocated_series", "HistoryRecorder", "OOMObserver",
           "oom_finding", "oom_verdict", "verdict_markdown", "start_forensics", "stop_forensics",
           "FORENSICS_MAX_ENTRIES", "memory_sections", "oom_message_facts"]

MiB = 1024 * 1024


RSS_INTERVAL_S = 0.05


class MemorySampler:
    """Appends one sample per step to ``allocated``/``reserved``/``peak`` (CUDA), or
    one every ``RSS_INTERVAL_S`` to ``rss`` with its step index in ``rss_steps`` (host)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.allocated: list[int] = []
        self.reserved: list[int] = []
        self.peak: list[int] = []
        self.rss: list[int] = []
        self.rss_steps: list[int] = []
        self._steps = 0
        self._next_rss = 0.0
        self.available = True
        self._fd: int | None = None
        if cuda:
            import torch

            self._stats = torch.cuda.memory_stats_as_nested_dict  # no flattening: cheap per step
            self.sample: Callable[[], None] = self._sample_cuda
        else:
            try:
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                self._page = os.sysconf("SC_PAGE_SIZE")
                self.sample = self._sample_rss
            except (OSError, AttributeError, ValueError):
                self.available = False
                self.sample = _noop

    @property
    def kind(self) -> str:
        return "cuda" if self.cuda else "host_rss"

    def series(self) -> list[int]:
        """The series the leak detector reads."""
        return self.allocated if self.cuda else self.rss

    def _sample_cuda(self) -> None:
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


def growth_finding(series: list[int], kind: str, options: CheckOptions,
                   location: SourceLocation | None = None) -> Finding | None:
    """GP640 when ``series`` (one sample per step) rises steadily (see the module docstring).

    ``kind``: ``cuda`` (every step's allocated bytes) or ``cpu_trace`` (recorded steps, from the trace).
    ``location`` is the capture's (the loop); :func:`with_leak_site` points the finding at the
    allocating line once the traces have told it (:func:`leak_site`).
    """
    if kind == "cpu_trace":
        samples = list(series)
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


# OOM forensics: allocator history kept from the start in a bounded ring, so the snapshot written at an
# out-of-memory error says what filled the device. Cost: torch records each allocation and free in a ring of
# FORENSICS_MAX_ENTRIES entries (host memory: a few hundred bytes an entry, stacks shared) and captures the Python
# stack of each allocation (stacks="python", context="alloc": no C++ unwinding, no stacks for frees); gpuprof has
# not measured the per-allocation cost on a GPU in this version. Off with oom_forensics=False.
FORENSICS_MAX_ENTRIES = 20_000


def start_forensics(max_entries: int) -> bool:
    """Record allocator history in a ring of ``max_entries`` entries (Python stacks of allocations only)."""
    import torch

    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                             max_entries=max_entries)
    return True


def stop_forensics() -> None:
    import torch

    torch.cuda.memory._record_memory_history(enabled=None)


class HistoryRecorder:
    """``torch.cuda.memory._record_memory_history`` around recorded steps; snapshots as pickle protocol 4.

    ``resume``: called instead of turning history off after a recorded window (the OOM-forensics ring goes
    on recording between windows).
    """

    def __init__(self, max_entries: int, resume: Callable[[], None] | None = None) -> None:
        self.max_entries = max_entries
        self.recording = False
        self.snapshots: list[Path] = []
        self.resume = resume

    def start(self) -> None:
        import torch

        torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
        self.recording = True

    def dump(self, path: Path) -> None:
        """Write the snapshot (also stops recording)."""
        import torch

        try:
            dump_snapshot(with_device_facts(torch.cuda.memory._snapshot()), path)
            self.snapshots.append(path)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.recording:
            import torch

            self.recording = False
            if self.resume is not None:
                self.resume()
            else:
                torch.cuda.memory._record_memory_history(enabled=None)


def with_device_facts(snap: Any) -> Any:
    """The snapshot with the current device's name, total and free bytes (``"gpuprof"`` key), so the analysis
    can judge capacity and say how much memory is not PyTorch's; the snapshot unchanged if they cannot be read."""
    import torch

    if not isinstance(snap, dict):
        return snap
    try:
        i = torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(i)
        dev = {"id": i, "name": torch.cuda.get_device_name(i), "total_memory": int(total), "free_memory": int(free)}
    except Exception:  # noqa: BLE001 - facts are a bonus; the snapshot is what matters
        return snap
    return dict(snap, gpuprof={"devices": [dev]})


def _cuda_facts() -> tuple[Callable[[], Any], Callable[[], dict[str, Any]], Callable[[int], dict[str, Any]]]:
    """torch's snapshot, memory_stats and per-device facts (name, total and free bytes)."""
    import torch

    def device(i: int) -> dict[str, Any]:
        free, total = torch.cuda.mem_get_info(i)
        return {"id": i, "name": torch.cuda.get_device_name(i), "total_memory": int(total), "free_memory": int(free)}

    return torch.cuda.memory._snapshot, torch.cuda.memory_stats, device


class OOMObserver:
    """On a CUDA out-of-memory error: the snapshot (``oom.pickle``) and the verdict (``oom.json``, ``oom.md``).

    Uses ``torch._C._cuda_attach_out_of_memory_observer`` (called by the
    allocator before it raises); the exception then propagates as usual.
    Observers cannot be detached, so a finished capture leaves an inert one.
    ``facts``: where the snapshot, ``memory_stats()`` and the device facts come
    from (torch's by default; tests give recorded ones).
    """

    def __init__(self, files: Callable[[int], tuple[Path, Path]], stream: Any = None,
                 facts: tuple[Callable[[], Any], Callable[[], dict[str, Any]], Callable[[int], dict[str, Any]]]
                 | None = None, owners: Callable[[], list[dict[str, Any]]] | None = None) -> None:
        self._files = files
        self._owners = owners  # the run's parameter/gradient/optimizer-state storages (gpuprof.capture.owners)
        self._stream = stream
        self._facts = facts
        self.active = False
        self.dumped: list[tuple[Path, Path]] = []
        self.attached = False

    def attach(self) -> bool:
        import torch

        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return False
        attach(self._observe)
        self.attached = True
        self.active = True
        return True

    def _observe(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        if not self.active:
            return
        try:
            self.dump(extra={"device": device, "requested_bytes": alloc,
                             "device_allocated_bytes": device_allocated, "device_free_bytes": device_free})
        except Exception as err:  # noqa: BLE001 - the OOM itself must still propagate
            print(f"gpuprof: could not dump the out-of-memory snapshot: {type(err).__name__}: {err}",
                  file=self._stream or sys.stderr)

    def dump(self, extra: dict[str, Any] | None = None) -> tuple[Path, Path]:
        """Write the snapshot and the verdict now; print one line naming them."""
        snapshot_fn, stats_fn, device_fn = self._facts or _cuda_facts()
        snap_path, verdict_path = self._files(len(self.dumped))
        extra = dict(extra or {})
        snap = snapshot_fn()
        meta: dict[str, Any] = {}
        dev = extra.get("device")
        if isinstance(snap, dict) and isinstance(dev, int):
            try:
                meta["devices"] = [device_fn(dev)]
            except Exception as err:  # noqa: BLE001 - the facts are a bonus; the snapshot is what matters
                meta["device_facts_error"] = type(err).__name__
            try:
                hs = _host_pinned()
                if hs:
                    meta["host_pinned"] = hs
            except Exception as err:  # noqa: BLE001 - older torch has no host allocator statistics
                meta["host_pinned_error"] = type(err).__name__
            if self._owners is not None:
                try:
                    meta["tensors"] = self._owners()
                except Exception as err:  # noqa: BLE001 - the stacks still attribute what they can
                    meta["tensors_error"] = type(err).__name__
            if "requested_bytes" in extra:
                meta["oom"] = {"device": dev, "requested_bytes": extra["requested_bytes"],
                               "device_free_bytes": extra.get("device_free_bytes")}
            snap = dict(snap, gpuprof=meta)
        dump_snapshot(snap, snap_path)
        self.dumped.append((snap_path, verdict_path))
        try:
            stats = stats_fn()
        except Exception:  # noqa: BLE001
            stats = {}
        try:
            verdict = oom_verdict(snap, snap_path, extra, stats)
        except Exception as err:  # noqa: BLE001 - the snapshot is written; say why the verdict is not
            verdict = {"snapshot": snap_path.name, "error": f"{type(err).__name__}: {err}", "memory_stats": stats,
                       **extra}
        atomic_write(verdict_path, json.dumps(verdict, indent=1, default=str))
        atomic_write(verdict_path.with_suffix(".md"), verdict_markdown(verdict))
        print(f"gpuprof: CUDA out of memory: snapshot {snap_path}, verdict {verdict_path} and "
              f"{verdict_path.with_suffix('.md').name} (inspect with: gpuprof memory {snap_path})",
              file=self._stream or sys.stderr)
        return snap_path, verdict_path


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_TRIED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)")
_GPU_FREE = re.compile(r"GPU (\d+) has a total capacity of (\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB) of which "
                       r"(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB) is free")


def oom_message_facts(text: str) -> dict[str, Any]:
    """What PyTorch's out-of-memory message says (``Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
    79.14 GiB of which 1.05 GiB is free``), for the verdict when no observer ran: the request, the device and
    its free bytes, to the message's precision (two decimals)."""
    out: dict[str, Any] = {}
    m = _TRIED.search(text)
    if m:
        out["requested_bytes"] = int(float(m.group(1)) * _UNITS[m.group(2)])
    g = _GPU_FREE.search(text)
    if g:
        out["device"] = int(g.group(1))
        out["device_free_bytes"] = int(float(g.group(4)) * _UNITS[g.group(5)])
    return out


def _host_pinned() -> dict[str, int]:
    """Pinned host memory PyTorch's host allocator holds now (torch.cuda.host_memory_stats, newer torch)."""
    import torch

    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None:
        return {}
    s = stats()
    out = {k: int(s[f"{k}.current"]) for k in ("allocated_bytes", "active_bytes") if f"{k}.current" in s}
    return out


def oom_verdict(snap: Any, snap_path: Path, facts: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """What was requested, what was free, and where the memory was: categories, stages, modules, top holders
    and the fixes ranked by bytes, from gpuprof's own analysis of the snapshot (no file re-read)."""
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.snapshot import parse_snapshot

    data = parse_snapshot(snap, str(snap_path))
    section, findings, _ = analyze_memory(data)
    want = f"cuda:{facts.get('device', 0)}"
    dev = next((d for d in section.devices if d["device"] == want), section.devices[0] if section.devices else {})
    at = dev["ooms"][0]["at_oom"] if dev.get("ooms") else {k: dev.get(k) for k in (
        "categories", "reserved_bytes", "allocated_bytes", "stages", "modules", "files")}
    return {
        "snapshot": snap_path.name,
        "device": dev.get("device", want),
        "requested_bytes": facts.get("requested_bytes"),
        "device_free_bytes": facts.get("device_free_bytes"),
        "device_allocated_bytes": facts.get("device_allocated_bytes"),
        "total_memory": dev.get("total_memory"),
        "categories": at.get("categories"),
        "reserved_bytes": at.get("reserved_bytes"),
        "allocated_bytes": at.get("allocated_bytes"),
        "stages": at.get("stages"),
        "modules": at.get("modules"),
        "top_holders": [{k: s.get(k) for k in ("site", "file", "line", "function", "bytes", "blocks")}
                        for s in ((dev["ooms"][0]["top_live_sites"] if dev.get("ooms") else dev.get("top_sites")) or [])],
        "fixes": dev.get("fixes", []),
        "pinned_host": section.pinned_host,
        "findings": [f.to_dict() for f in findings],
        "memory_stats": stats,
        **{k: v for k, v in facts.items() if k not in ("requested_bytes", "device_free_bytes",
                                                         "device_allocated_bytes", "device")},
    }


def verdict_markdown(v: dict[str, Any]) -> str:
    """``oom.md``: the verdict for people."""
    from gpuprof.memory.units import fmt_bytes
    from gpuprof.render.markdown import md_code, md_escape

    def b(x: Any) -> str:
        return fmt_bytes(x) if isinstance(x, int) else "unknown"

    lines = ["# CUDA out of memory", ""]
    if v.get("error"):
        lines += [f"The verdict could not be computed ({md_escape(v['error'])}); the snapshot is "
                  f"{md_code(v.get('snapshot', ''))}.", ""]
        return "\n".join(lines) + "\n"
    lines += [f"- device: {md_escape(str(v.get('device')))}",
              f"- requested: {b(v.get('requested_bytes'))}; free on the device: {b(v.get('device_free_bytes'))}",
              f"- reserved by PyTorch: {b(v.get('reserved_bytes'))}; allocated: {b(v.get('allocated_bytes'))}",
              f"- snapshot: {md_code(v.get('snapshot', ''))} (`gpuprof memory` it for the full view)", "",
              "## Where the memory was", "", "| category | bytes |", "|---|---|"]
    for k, x in (v.get("categories") or {}).items():
        if x:
            lines.append(f"| {md_escape(k.replace('_', ' '))} | {b(x)} |")
    if v.get("top_holders"):
        lines += ["", "## Top holders", "", "| site | bytes |", "|---|---|"]
        lines += [f"| {md_code(str(h.get('site')), cell=True)} | {b(h.get('bytes'))} |" for h in v["top_holders"][:10]]
    if v.get("fixes"):
        lines += ["", "## Fixes ranked by the bytes each saves", ""]
        lines += [f"{i}. {md_escape(f['what'])}: {b(f['saves_bytes'])}" for i, f in enumerate(v["fixes"], 1)]
    return "\n".join(lines) + "\n"


def oom_finding(files: list[tuple[Path, Path]], message: str) -> Finding:
    c = runtime_check("GP641")
    first = str(message).strip().splitlines()[0] if str(message).strip() else "CUDA out of memory"
    names = "; ".join(f"{s} and {j}" for s, j in files) or "no snapshot could be written"
    return Finding(
        code=c.code, name=c.name, severity=c.severity,
        message=f"the run hit CUDA out-of-memory ({first}); dumped {names}",
        advice=f"Run `gpuprof memory {files[0][0] if files else '<snapshot>'}` to see what held the memory at "
               "the moment of the OOM; then reduce the batch size, use activation checkpointing or mixed "
               "precision, or free tensors kept across steps.",
        evidence=(Evidence("oom_snapshots", len(files), None, "files",
                           extra={"files": [[str(s), str(j)] for s, j in files]}),),
        origin="runtime",
    )


_OOM_SNAPSHOT_NAME = re.compile(r"oom(\.\d+)?\.pickle")
MAX_SECTION_SNAPSHOTS = 2  # the last recorded window's snapshot and the first OOM dump: the report stays small


def memory_sections(snapshots: Sequence[str], files: Sequence[str]) -> tuple[list[Any], list[Finding]]:
    """The capture report's memory sections: the analysis (categories, stages, modules, holders) of the last
    recorded window's snapshot and of the first out-of-memory dump among ``files``, with the findings of the
    dump (GP512, which the run's GP641 is folded into)."""
    from gpuprof.memory.analysis import analyze_memory
    from gpuprof.memory.load import load_memory

    chosen: list[tuple[str, bool]] = [(snapshots[-1], False)] if snapshots else []
    oom = next((f for f in files if _OOM_SNAPSHOT_NAME.fullmatch(os.path.basename(f))), None)
    if oom is not None:
        chosen.append((oom, True))
    sections: list[Any] = []
    findings: list[Finding] = []
    for path, is_oom in chosen[:MAX_SECTION_SNAPSHOTS]:
        section, found, _ = analyze_memory(load_memory(path))
        sections.append(section)
        if is_oom:
            findings += [f for f in found if f.code == "GP512"]
    return sections, findings
