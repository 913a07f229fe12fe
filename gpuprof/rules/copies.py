"""GP201/GP202/GP204: host↔device copies that cost the GPU time."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import Evidence, Finding, Severity, SourceLocation
from gpuprof.rules.base import Rule, RuleContext, event_refs, register
from gpuprof.rules.cause import CauseFigure, idle_part_per_step
from gpuprof.rules.common import copy_wait_calls, count_of, kernel_idle_within
from gpuprof.rules.whatif import WhatIf, copy_waits
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.syncs import QUEUED_US, CopyEvent, queued_us
from gpuprof.trace.vocab import is_synchronous_copy
from gpuprof.units import fmt_bytes, fmt_us

__all__ = ["PageableCopy", "BlockingCopy", "SmallDeviceToHostCopies"]


def _copy_location(m: TraceMetrics, c: CopyEvent) -> SourceLocation | None:
    ev = c.launch if c.launch is not None else c.gpu
    op = m.op_by_ext.get(ev.ext) if ev.ext >= 0 else None
    return m.stacks.location(ev.pid, ev.tid, ev.ts, op=op)


def _most_common(locs: Iterable[SourceLocation | None]) -> SourceLocation | None:
    counts = Counter(loc for loc in locs if loc is not None)
    return max(counts, key=lambda k: counts[k]) if counts else None


_SMALL_COPY = 64 << 10  # below this a host→device copy is a scalar or a tiny index, not a batch
_DIR_WORDS = {"HtoD": "host→device", "DtoH": "device→host"}


def _copy_numbers(m: TraceMetrics, copies: list[CopyEvent]) -> dict[str, float]:
    """Per-step figures of a group of copies (definitions in the rule docstrings)."""
    n = max(m.num_steps, 1)
    sizes = [c.gpu.nbytes for c in copies]
    total_bytes = sum(sizes)
    gpu_us = sum(c.gpu.dur for c in copies)
    waits = [w for c in copies for w in copy_wait_calls(m, c)]
    host = [(w.ts, w.end) for w in waits]
    blocked = Intervals.from_pairs(host).total()
    return {
        "count_per_step": len(copies) / n,
        "bytes_per_step": total_bytes / n,
        "bytes_per_copy": max(sizes) if sizes else 0,
        "gpu_us_per_step": gpu_us / n,
        "bandwidth_gbps": (total_bytes / gpu_us / 1e3) if gpu_us > 0 else 0.0,
        "host_blocked_us_per_step": blocked / n,
        "kernel_idle_us_per_step": (kernel_idle_within(m, host) / n) if m.main_device is not None else blocked / n,
    }


def _waits(m: TraceMetrics, copies: list[CopyEvent]) -> Intervals:
    """Union of the host calls in which the host waited for ``copies`` (see ``copy_wait_calls``)."""
    return Intervals.from_pairs([(w.ts, w.end) for c in copies for w in copy_wait_calls(m, c)])


def _idle_per_step(m: TraceMetrics, host: Intervals) -> float:
    """Per step: the part of ``host`` when the main GPU ran no kernel (all of it without a GPU)."""
    n = max(m.num_steps, 1)
    return (kernel_idle_within(m, list(host)) if m.main_device is not None else host.total()) / n


def pageable_copies(m: TraceMetrics, min_bytes_per_step: float) -> dict[str, list[CopyEvent]]:
    """GP201's copies: pageable copies inside steps, per direction, where they move enough bytes per step."""
    by_dir: dict[str, list[CopyEvent]] = defaultdict(list)
    for c in m.copies:
        if c.step is not None and c.kind.host_memory == "pageable" and c.kind.direction in _DIR_WORDS:
            by_dir[c.kind.direction].append(c)
    n = max(m.num_steps, 1)
    return {d: cs for d, cs in sorted(by_dir.items()) if sum(c.gpu.nbytes for c in cs) / n >= min_bytes_per_step}


def _int_bytes(nums: dict[str, float]) -> dict[str, float | int]:
    """Byte figures as integers, the rest rounded, for evidence ``extra``."""
    return {k: (int(v) if "bytes" in k else round(v, 3)) for k, v in nums.items()}


def _copy_evidence(metric: str, value: float, threshold: float | None, unit: str, nums: dict[str, float],
                   copies: list[CopyEvent]) -> Evidence:
    return Evidence(metric, value, threshold, unit, events=event_refs(c.gpu for c in copies), extra=_int_bytes(nums))


# ------------------------------------------------------------------ GP201


@register
class PageableCopy(Rule):
    """Host↔device copies from or to pageable (not page-locked) host memory.

    Detected from the GPU copy's name, ``Memcpy HtoD (Pageable -> Device)`` /
    ``Memcpy DtoH (Device -> Pageable)``, for copies inside steps. The CUDA
    driver stages a pageable copy through a pinned bounce buffer, so it runs
    at a fraction of the bus bandwidth and the host call does not return until
    the data is staged: the copy can never overlap with compute and
    ``non_blocking=True`` has no effect.

    Figures per direction: bytes per step (all pageable copies of the step),
    bytes per copy (the largest copy), count per step, achieved bandwidth
    (bytes / GPU copy time). The cost is the time, per step, during which the
    host was inside these copy calls (or the synchronisation right after
    them) while the main GPU ran no kernel. GP201 owns this cost when GP202
    reports the same (blocking) copies: GP202 then names GP201 in its
    ``cost_counted_in`` evidence and charges only its other copies.
    """

    code = "GP201"
    name = "pageable-copy"
    title = "Copies from/to pageable host memory"
    what_if = WhatIf("copies made asynchronous (pinned memory, non_blocking=True)", copy_waits(None, True))
    cause = CauseFigure("GPU idle in blocking copies", idle_part_per_step("blocking_copy"))
    severity = Severity.WARNING
    options = (
        Option("min_bytes_per_step", 1 << 20, "report a direction when its pageable copies move at least this many bytes per step"),
    )
    bad_example = """
        loader = DataLoader(ds, batch_size=32)            # batches live in pageable memory
        for x, y in loader:
            x = x.to("cuda")                              # Memcpy HtoD (Pageable -> Device), synchronous
    """
    good_example = """
        loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)
        for x, y in loader:
            x = x.to("cuda", non_blocking=True)           # Memcpy HtoD (Pinned -> Device), asynchronous
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        for direction, copies in pageable_copies(m, ctx.opt("min_bytes_per_step")).items():
            nums = _copy_numbers(m, copies)
            blocking = sum(1 for c in copies if c.blocking)
            words = _DIR_WORDS[direction]
            advice = (
                "Pin the host memory so the copy can run asynchronously at full bus speed: "
                "DataLoader(..., pin_memory=True) for batches, or tensor.pin_memory() for tensors you copy "
                "repeatedly; then copy with .to(device, non_blocking=True)."
                if direction == "HtoD"
                else "Copy into a preallocated pinned buffer: buf = torch.empty(shape, pin_memory=True); "
                "buf.copy_(t, non_blocking=True), and synchronise (an event) only when the data is read."
            )
            yield self.finding(
                ctx,
                f"{count_of(nums['count_per_step'], f'pageable {words} copy', f'pageable {words} copies')} per step "
                f"({fmt_bytes(nums['bytes_per_step'])} per step, largest copy {fmt_bytes(nums['bytes_per_copy'])} "
                f"= {nums['bytes_per_copy']:,} bytes), achieved bandwidth {nums['bandwidth_gbps']:.1f} GB/s "
                f"(bytes / GPU copy time); {blocking} of the {len(copies)} copies in {m.num_steps} steps "
                f"blocked the host",
                advice,
                evidence=[_copy_evidence("pageable_bytes_per_step", int(nums["bytes_per_step"]),
                                         ctx.opt("min_bytes_per_step"), "bytes", nums, copies)],
                cost_us_per_step=nums["kernel_idle_us_per_step"],
                cost_label="host waiting in these copies with no kernel running",
                location=_most_common(_copy_location(m, c) for c in copies),
            )


# ------------------------------------------------------------------ GP202


@register
class BlockingCopy(Rule):
    """Host→device copies after which the host waits for the GPU.

    A copy is blocking (see ``gpuprof.trace.metrics``) when its host call
    returned only after the GPU copy ended, or when a stream/device
    synchronisation follows it before any other GPU work is queued: the
    ``.to(device)`` of a pageable tensor, or ``non_blocking=False``. While the
    host waits it queues no kernels, so the GPU drains and then idles.

    Synchronous copy APIs (``cudaMemcpy``, ``hipMemcpy``,
    ``hipMemcpyWithStream``: not ``*Async``) always block: the host waits in
    them first for the GPU work queued before the copy on its stream, then
    for the copy; the message names that queueing (how long the copies'
    GPU side started after their calls) when it is a real part of the wait.

    Host time blocked per step = union of the copy calls and the
    synchronisations after them. The cost is the part of that time when the
    main GPU ran no kernel (the copy itself included: with an asynchronous
    copy the host would keep queueing work meanwhile). Device→host copies are
    host syncs by nature and are reported by GP203/GP204.

    **Shared cost with GP201.** A pageable copy is blocking too, so the two
    rules can describe the same copies. When GP201 runs in the same analysis
    and reports the host→device direction, GP201 owns the cost of those
    pageable copies (pinning them is the fix): GP202's cost is only the
    kernel-idle time of its other blocking copies, outside the host time
    already charged to GP201, and its evidence ``cost_counted_in`` names
    GP201 with the part left there. The two costs add up to the kernel-idle
    time of all the copies, counted once. Without GP201 (``--select GP202``,
    ``--ignore GP201``), GP202 charges all its copies.
    """

    code = "GP202"
    name = "blocking-copy"
    title = "Blocking host→device copies"
    what_if = WhatIf("host→device copies made asynchronous", copy_waits("HtoD", True))
    cause = CauseFigure("GPU idle in blocking copies", idle_part_per_step("blocking_copy"))
    severity = Severity.WARNING
    options = (
        Option("min_blocked_us_per_step", 100.0, "report when the host waits at least this long per step (µs)"),
    )
    bad_example = """
        for x, y in loader:
            x, y = x.to("cuda"), y.to("cuda")            # host waits for each copy
            loss = model(x).sum()
    """
    good_example = """
        loader = DataLoader(ds, batch_size=32, num_workers=4, pin_memory=True)
        for x, y in loader:
            x = x.to("cuda", non_blocking=True)           # queued; the host runs on
            y = y.to("cuda", non_blocking=True)
            loss = model(x).sum()                         # no torch.cuda.synchronize() here
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if not m.steps:
            return
        copies = [c for c in m.copies if c.step is not None and c.blocking and c.kind.direction == "HtoD"]
        if not copies:
            return
        nums = _copy_numbers(m, copies)
        if nums["host_blocked_us_per_step"] < ctx.opt("min_blocked_us_per_step"):
            return
        pageable = sum(1 for c in copies if c.kind.host_memory == "pageable")
        queued = sum(queued_us(c, m.kernel_busy) for c in copies) / max(m.num_steps, 1)
        sync_api = sorted({c.launch.name for c in copies if c.launch is not None and is_synchronous_copy(c.launch.name)})
        queue_text = (f"; {fmt_us(queued)} per step of that wait is queued behind kernels launched before the copy "
                      f"(a synchronous copy, {', '.join(sync_api)}, starts only when its stream's earlier kernels end)"
                      if queued >= max(QUEUED_US, 0.05 * nums["host_blocked_us_per_step"]) and sync_api else "")
        with_sync = sum(1 for c in copies if len(copy_wait_calls(m, c)) > 1)
        kinds = {c.kind.host_memory for c in copies}
        memory = " and ".join(sorted(k for k in kinds if k != "unknown")) if kinds != {"unknown"} else ""
        memory_ = memory + " " if memory else ""
        # Cost shared with GP201: the pageable host→device copies it reports are charged there, once.
        gp201 = ctx.runs("GP201")
        owned = pageable_copies(m, gp201["min_bytes_per_step"]).get("HtoD", []) if gp201 is not None else []
        owned_ids = {id(c) for c in owned}
        own_host = _waits(m, [c for c in copies if id(c) not in owned_ids])
        cost = nums["kernel_idle_us_per_step"]
        shared = []
        if owned:
            owned_host = _waits(m, owned)
            cost = _idle_per_step(m, own_host.subtract(owned_host))
            shared_us = max(nums["kernel_idle_us_per_step"] - cost, 0.0)
            shared = [Evidence("cost_counted_in", "GP201", None, "",
                               extra={"kernel_idle_us_per_step": round(shared_us, 3),
                                      "copies": sum(1 for c in copies if id(c) in owned_ids)})]
            label = f"that waiting less the {fmt_us(shared_us)} per step counted in GP201 (its pageable copies)"
        else:
            label = "that waiting with no kernel running"
        yield self.finding(
            ctx,
            f"{count_of(nums['count_per_step'], f'blocking {memory_}host→device copy', f'blocking {memory_}host→device copies')}"
            " per step "
            f"({fmt_bytes(nums['bytes_per_step'])} per step, largest copy {fmt_bytes(nums['bytes_per_copy'])} "
            f"= {nums['bytes_per_copy']:,} bytes): the host waits {fmt_us(nums['host_blocked_us_per_step'])} "
            f"per step in them, {fmt_us(nums['kernel_idle_us_per_step'])} per step of it with no kernel running"
            f"{queue_text}",
            "Copy from pinned memory without waiting: DataLoader(pin_memory=True) (or tensor.pin_memory()), then "
            ".to(device, non_blocking=True); do not call torch.cuda.synchronize(), .item() or .cpu() right after "
            "the copy."
            + (" For small values made each step (torch.tensor(x, device='cuda')), create them on the GPU "
               "(torch.full(..., device='cuda')) or pass Python numbers." if nums["bytes_per_copy"] < _SMALL_COPY else ""),
            evidence=[Evidence("host_blocked_us_per_step", round(nums["host_blocked_us_per_step"], 1),
                               ctx.opt("min_blocked_us_per_step"), "us", events=event_refs(c.gpu for c in copies),
                               extra={**_int_bytes(nums), "pageable_copies": pageable, "followed_by_sync": with_sync,
                                      "queued_behind_gpu_work_us_per_step": round(queued, 1),
                                      "synchronous_copy_calls": sync_api}), *shared],
            cost_us_per_step=cost, cost_label=label, location=_most_common(_copy_location(m, c) for c in copies),
        )


# ------------------------------------------------------------------ GP204


@register
class SmallDeviceToHostCopies(Rule):
    """Small device→host copies in (nearly) every step: ``loss.item()``, ``metric.cpu()``.

    A small copy (fewer than ``max_bytes``) from the GPU to the host forces
    the host to wait until all queued GPU work is done, every step. Reported
    per source line when Python stacks are recorded (one finding per line),
    with the count per step; only when such copies occur in at least
    ``min_step_fraction`` of the steps. The cost is the time per step the
    host spent in those copy calls and the synchronisations right after them
    while the main GPU ran no kernel.
    """

    code = "GP204"
    name = "small-dtoh-copies"
    title = "Small device→host copies every step"
    what_if = WhatIf("the small device→host copies' waits gone", copy_waits("DtoH", False))
    severity = Severity.INFO
    options = (
        Option("max_bytes", 64 << 10, "copies smaller than this many bytes count as small"),
        Option("min_step_fraction", 0.8, "report when at least this fraction of steps has such a copy"),
        Option("min_steps", 2, "need at least this many steps to call something per-step"),
    )
    bad_example = """
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward(); opt.step()
            running += loss.item()                        # device→host copy + sync every step
    """
    good_example = """
        running = torch.zeros((), device="cuda")
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss.backward(); opt.step()
            running += loss.detach()                      # stays on the GPU
            if i % 100 == 0:
                print(running.item() / 100); running.zero_()
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        if m.num_steps < ctx.opt("min_steps"):
            return
        small = [c for c in m.copies
                 if c.step is not None and c.kind.direction == "DtoH" and 0 <= c.gpu.nbytes < ctx.opt("max_bytes")]
        groups: dict[SourceLocation | None, list[CopyEvent]] = defaultdict(list)
        for c in small:
            groups[_copy_location(m, c)].append(c)
        for loc, copies in groups.items():
            steps_hit = {c.step for c in copies}
            frac = len(steps_hit) / m.num_steps
            if frac < ctx.opt("min_step_fraction"):
                continue
            nums = _copy_numbers(m, copies)
            where = f" at {loc}" if loc else ""
            yield self.finding(
                ctx,
                f"{count_of(nums['count_per_step'], 'small device→host copy', 'small device→host copies')} per step{where} "
                f"(in {len(steps_hit)} of {m.num_steps} steps, up to {fmt_bytes(nums['bytes_per_copy'])} each): "
                f"the host waits {fmt_us(nums['host_blocked_us_per_step'])} per step",
                "Keep per-step scalars on the GPU (accumulate loss.detach() into a GPU tensor) and read them with "
                ".item()/.cpu() only every N steps; for logging, copy into a pinned buffer with non_blocking=True and "
                "read it after a later synchronisation.",
                evidence=[Evidence("steps_with_small_dtoh_fraction", round(frac, 4), ctx.opt("min_step_fraction"),
                                   "fraction", events=event_refs(c.gpu for c in copies),
                                   extra={**_int_bytes(nums), "max_bytes": ctx.opt("max_bytes")})],
                cost_us_per_step=nums["kernel_idle_us_per_step"],
                cost_label="host waiting in these copies with no kernel running", location=loc,
            )
