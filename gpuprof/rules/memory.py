"""GP501: GPU memory use comes close to the device's capacity (from ``[memory]`` events)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from gpuprof.codespec import Option
from gpuprof.findings import EventRef, Evidence, Finding, Severity
from gpuprof.rules.base import Rule, RuleContext, register
from gpuprof.trace.model import Event, Trace, memory_totals
from gpuprof.trace.phase import serving_engine
from gpuprof.units import fmt_bytes, fmt_us

__all__ = ["MemoryNearCapacity", "DevicePeak", "device_peaks", "GPU_DEVICE_TYPES"]

# c10::DeviceType of GPU memory in [memory] events: 1 = CUDA, 6 = HIP (ROCm builds write either).
GPU_DEVICE_TYPES = frozenset({1, 6})


@dataclass
class DevicePeak:
    """Peak memory of one GPU as the caching allocator reported it.

    ``reserved`` is the largest "Total Reserved" (memory the allocator holds
    from the driver) of any ``[memory]`` event of the device, ``allocated``
    the "Total Allocated" (memory in live tensors) at that same event; the
    peak of "Total Allocated" itself is ``max_allocated``. ``capacity`` is the
    device's ``totalGlobalMem`` from deviceProperties.
    """

    device: int
    capacity: int
    reserved: int
    allocated: int
    max_allocated: int
    at: Event  # the event at peak reserved
    max_allocated_at: Event


def device_peaks(trace: Trace) -> list[DevicePeak]:
    """One :class:`DevicePeak` per GPU that has [memory] events with totals and a known capacity."""
    capacity = {d.id: d.total_memory for d in trace.devices if d.total_memory}
    # per device: [(totals, event) at the most reserved, (totals, event) at the most allocated]
    best: dict[int, list[tuple[tuple[int, int], Event]]] = {}
    for e in trace.memory:
        if e.stream not in GPU_DEVICE_TYPES or e.device < 0:
            continue
        totals = memory_totals(e)
        if totals is None:
            continue
        cur = best.get(e.device)
        if cur is None:
            best[e.device] = [(totals, e), (totals, e)]
            continue
        if totals[1] > cur[0][0][1]:
            cur[0] = (totals, e)
        if totals[0] > cur[1][0][0]:
            cur[1] = (totals, e)
    out = []
    for dev, ((res_totals, res), (alloc_totals, alloc)) in sorted(best.items()):
        cap = capacity.get(dev)
        if not cap:
            continue
        reserved = max(res_totals[1], res_totals[0])  # older builds write Total Reserved -1
        out.append(DevicePeak(dev, cap, reserved, res_totals[0], alloc_totals[0], res, alloc))
    return out


@register
class MemoryNearCapacity(Rule):
    """GPU memory held by PyTorch came close to the device's capacity.

    Read from the ``[memory]`` events that ``profile_memory=True`` records:
    each carries the caching allocator's "Total Allocated" and "Total
    Reserved" after an allocation or free. The peak reserved memory is
    compared with the GPU's ``totalGlobalMem``. Near the limit the allocator
    starts freeing its cache and retrying (``cudaFree`` + ``cudaMalloc``
    stalls), and a slightly larger batch, a longer sequence or another
    process on the GPU ends in an out-of-memory error. When reserved is much
    larger than the peak allocated, the difference is cached blocks that
    fragmentation keeps from being reused.

    **Reserved never allocated** = peak reserved - peak allocated: memory the
    allocator held that live tensors never needed at one time (cached blocks
    of the wrong sizes).
    """

    code = "GP501"
    name = "memory-near-capacity"
    superseded_by = ("GP510",)  # a snapshot knows the capacity and the holders at the peak
    title = "GPU memory near capacity"
    severity = Severity.WARNING
    options = (
        Option("warn_share", 0.90, "peak reserved memory above this share of the GPU's memory is a warning"),
        Option("error_share", 0.97, "peak reserved memory above this share is an error"),
        Option("fragmentation_share", 0.25, "report peak reserved minus peak allocated above this share of reserved"),
        Option("fragmentation_min_bytes", 1 << 30, "...when it is also at least this many bytes"),
    )
    bad_example = """
        model = GPT(n_layer=48).cuda()
        for x, y in loader:                     # batch_size=64 fills 79 of 80 GB
            loss = model(x, y)
            loss.backward(); opt.step(); opt.zero_grad()
    """
    good_example = """
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"   # before the first CUDA call
        model = GPT(n_layer=48).cuda()
        for x, y in loader:                     # batch_size=32 with gradient accumulation
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                loss = model(x, y)              # blocks wrapped in torch.utils.checkpoint
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    """

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        m = ctx.metrics
        t0 = _trace_start(ctx)
        engine = serving_engine(m)
        for p in device_peaks(ctx.trace):
            share = p.reserved / p.capacity
            if share < ctx.opt("warn_share"):
                continue
            sev = Severity.ERROR if share >= ctx.opt("error_share") else Severity.WARNING
            step = m.step_of(p.at.ts)
            when = f"{fmt_us(p.at.ts - t0)} into the trace"
            if step is not None and m.has_step_markers:
                when += f", in step {m.steps[step].id}"
            slack = p.reserved - p.max_allocated
            frag = slack / p.reserved if p.reserved > 0 else 0.0
            fragmented = frag >= ctx.opt("fragmentation_share") and slack >= ctx.opt("fragmentation_min_bytes")
            msg = (
                f"GPU {p.device} memory near capacity: peak reserved {fmt_bytes(p.reserved)} of "
                f"{fmt_bytes(p.capacity)} ({share:.0%}) {when}; allocated by tensors then {fmt_bytes(p.allocated)} "
                f"(peak {fmt_bytes(p.max_allocated)}, {p.max_allocated / p.capacity:.0%})"
            )
            if fragmented:
                msg += (
                    f"; the allocator reserved {fmt_bytes(slack)} ({frag:.0%} of reserved) more than tensors ever "
                    "used at once: fragmentation"
                )
            advice = []
            if fragmented:
                advice.append(
                    "Cut fragmentation first: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before the first "
                    "CUDA call (or max_split_size_mb), and avoid tensors whose sizes change every step"
                )
            advice.append(
                "Lower the peak: a smaller batch with gradient accumulation, activation checkpointing "
                "(torch.utils.checkpoint) on the largest blocks, mixed precision (torch.autocast with bfloat16) "
                "to halve activations, zero_grad(set_to_none=True), and an optimizer with less state "
                "(or ZeRO/FSDP sharding across GPUs)"
            )
            advice.append("Run `gpuprof memory` on a memory snapshot to see which allocations make up the peak")
            if engine is not None:  # the engine's KV cache, pre-allocated to a share of the GPU it was told to take
                sev = Severity.INFO
                msg += (f"; {engine} pre-allocates its KV cache at start-up to the share of GPU memory it is given: "
                        "this peak is that cache, by design, not a peak to cut")
                advice = [f"Nothing to fix if {engine} runs as intended: its KV cache takes what its memory setting "
                          "allows (vLLM: gpu_memory_utilization; SGLang: mem_fraction_static). Lower that setting only "
                          "to leave room for another process on the GPU"]
            yield self.finding(ctx, msg, ". ".join(advice) + ".", severity=sev, evidence=[
                Evidence("peak_reserved_share", round(share, 4), ctx.opt("warn_share"), "fraction",
                         events=(EventRef(name=p.at.name, ts=p.at.ts, pid=p.at.pid, tid=p.at.tid),),
                         extra={"device": p.device, "capacity_bytes": p.capacity, "peak_reserved_bytes": p.reserved,
                                "allocated_at_peak_bytes": p.allocated, "peak_allocated_bytes": p.max_allocated,
                                "peak_allocated_share": round(p.max_allocated / p.capacity, 4),
                                "step_id": m.steps[step].id if step is not None else None}),
                Evidence("reserved_never_allocated_share", round(frag, 4), ctx.opt("fragmentation_share"), "fraction",
                         extra={"reserved_never_allocated_bytes": slack}),
            ])


def _trace_start(ctx: RuleContext) -> float:
    """Time of the trace's first event."""
    starts = [evs[0].ts for evs in ctx.trace.lists().values() if evs]
    return min(starts) if starts else 0.0
