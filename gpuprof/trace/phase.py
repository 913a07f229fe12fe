"""Is this a trace of steady-state steps, or of a CUDA/HIP graph capture pass? (issue 37)

A capture pass records kernels into a graph instead of running them: the GPU is nearly idle, the host spends its
time in the capture machinery (``torch.cuda.graphs``' ``capture_begin``, Inductor's ``CUDAGraphNode.record``,
vLLM's and SGLang's ``capture_model``), and graph instantiation calls appear. Its utilisation, syncs and
instantiation costs say nothing about the steps that replay the graph, and a rule that advises removing them
would advise removing what recording needs.

**Capture share**: the union of the capture ranges (Python frames and ``record_function`` ranges whose names
say capture, and the runtime's begin-capture .. end-capture calls) over the trace's steps (the whole trace
without step markers). **A capture pass**: share at least ``CAPTURE_SHARE``, or graph instantiation calls in a
trace whose GPU was busy less than 5% of the time.

A **serving engine** (vLLM, SGLang) pre-allocates most of the GPU's memory for its KV cache at start-up: memory
near capacity in its traces is that cache, by design.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from gpuprof.trace.columns import named
from gpuprof.trace.intervals import Intervals
from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import Event

__all__ = ["TracePhase", "trace_phase", "serving_engine", "CAPTURE_SHARE", "is_compile_phase", "compile_phase_ops",
           "inductor_recording", "compile_time"]

CAPTURE_SHARE = 0.30

_CAPTURE = re.compile(
    r"torch/cuda/graphs\.py\(\d+\): (?:capture_begin|__enter__)|cudagraph_trees\.py\(\d+\): (?:record|_record)"
    r"|CUDAGraphNode\.record|capture_model|_capture_cudagraphs|capture_cuda_graph|cuda_graph_runner\.py\(\d+\): capture"
    r"|^capture_\d+|graph_capture",
)
_INSTANTIATE = re.compile(r"GraphInstantiate|StreamBeginCapture|StreamEndCapture")
_ENGINES = (("vllm/", "vLLM"), ("sglang/", "SGLang"))
# Inductor's CUDA-graph trees recording a graph (torch.compile(mode="reduce-overhead") on its first calls per shape)
_INDUCTOR_RECORD = re.compile(r"cudagraph_trees\.py\(\d+\): (?:record|_record)\b|CUDAGraphNode\.record")
_PHASES = ("entire_frame_compile", "backend_compile", "compile_fx_inner", "_compile.compile_inner")


@dataclass(frozen=True)
class TracePhase:
    """What the trace records, when it is not steady-state steps."""

    kind: str  # "graph-capture"
    share: float  # of the steps' time (the trace's) inside capture ranges
    marker: str  # the name that says so
    instantiations: int  # graph instantiation / begin-capture calls


def trace_phase(m: TraceMetrics) -> TracePhase | None:
    """The trace's phase (module docstring), None for ordinary steps."""
    trace = m.trace
    ranges = [*named(trace.python, _CAPTURE.search, trace), *named(trace.annotations, _CAPTURE.search, trace)]
    calls = named(trace.runtime, _INSTANTIATE.search, trace)
    if not ranges and not calls:
        return None
    span = sum(s.end - s.start for s in m.steps) if m.steps else 0.0
    if span <= 0:
        return None
    inside = Intervals.from_pairs([(e.ts, e.ts + e.dur) for e in ranges])
    windows = Intervals.from_pairs([(s.start, s.end) for s in m.steps])
    share = inside.intersect(windows).total() / span
    util = m.gpu_utilization
    if share < CAPTURE_SHARE and not (calls and util is not None and util < 0.05):
        return None
    marker = (max(ranges, key=lambda e: e.dur).name if ranges else calls[0].name)
    return TracePhase("graph-capture", min(share, 1.0), marker, len(calls))


def serving_engine(m: TraceMetrics) -> str | None:
    """``vLLM`` or ``SGLang`` when the trace's Python frames run in one, else None."""
    trace = m.trace
    for prefix, engine in _ENGINES:
        if named(trace.python, _contains(prefix), trace):
            return engine
    return None


def _contains(part: str) -> Callable[[str], bool]:
    return lambda name: part in name


@functools.lru_cache(maxsize=8192)
def is_compile_phase(name: str) -> bool:
    """A Dynamo/Inductor compilation phase (not running compiled code): ``... (dynamo_timed)`` and the like."""
    return name.endswith(" (dynamo_timed)") or name.startswith(_PHASES) or name.startswith("compile_attempt_")


def compile_phase_ops(m: TraceMetrics) -> list[Event]:
    """The operators of the trace that are torch.compile phases (:func:`is_compile_phase`), found once
    per trace: GP811, GP903 and the summary's warm-up note ask."""
    return m.memo(_compile_phase_ops)


def _compile_phase_ops(m: TraceMetrics) -> list[Event]:
    return [op for op in m.trace.ops if is_compile_phase(op.name)]


def inductor_recording(m: TraceMetrics) -> list[Event]:
    """Python frames and ranges of Inductor recording a CUDA graph (``CUDAGraphNode.record``, cudagraph_trees'
    ``record``): torch.compile's warm-up with mode="reduce-overhead", found once per trace."""
    return m.memo(_inductor_recording)


def _inductor_recording(m: TraceMetrics) -> list[Event]:
    t = m.trace
    return [*named(t.python, _INDUCTOR_RECORD.search, t), *named(t.annotations, _INDUCTOR_RECORD.search, t)]


def compile_time(m: TraceMetrics) -> float:
    """µs the trace spends in torch.compile's warm-up, anywhere in it: the union of its compilation phases and
    of Inductor's CUDA-graph recording."""
    spans = [(e.ts, e.ts + e.dur) for e in (*compile_phase_ops(m), *inductor_recording(m))]
    return Intervals.from_pairs(spans).total()
