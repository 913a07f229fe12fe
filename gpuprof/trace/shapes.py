"""Do the recorded steps run with static shapes? (What CUDA graphs need.)

Definitions:

**Shapes of a step**: the distinct (operator name, ``Input Dims``) pairs of the
matmul, convolution and attention operators (``vocab.SHAPE_KEY_OPS``) that
start inside the step's window. The loader keeps each operator's ``Input Dims``
text (``model.op_shape_key``), so this needs a trace recorded with
``record_shapes=True``. Steps without such an operator are left out.

**Shape ratio**: the number of distinct pairs over all compared steps divided
by the mean number per step. 1.0 when every step sees the same shapes; about
the number of distinct batch/sequence sizes when they change from step to step.
It is a ratio rather than a step-by-step equality because real step windows do
not always hold whole iterations (a layer's matmul can fall in the next
step's window): HTA's sampled ranking-model traces read 1.21-1.23.

**Static shapes**: ratio at most ``STATIC_MAX`` (1.05): a CUDA graph, which
replays fixed kernel launches on fixed memory, can capture the step once
(``torch.compile(mode="reduce-overhead")`` records one graph per distinct
shape). **Changing shapes**: ratio at least ``CHANGING_MIN`` (1.5). Between
the two, or without step markers, with fewer than two compared steps, or with
no ``Input Dims``: unknown (None).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprof.trace.metrics import TraceMetrics
from gpuprof.trace.model import op_shape_key
from gpuprof.trace.vocab import SHAPE_KEY_OPS

__all__ = ["StepShapes", "step_shapes", "STATIC_MAX", "CHANGING_MIN"]

STATIC_MAX = 1.05
CHANGING_MIN = 1.5


@dataclass(frozen=True)
class StepShapes:
    """What the steps' shapes say (module docstring); ``static`` is None when they say nothing clear."""

    static: bool | None
    ratio: float | None  # the shape ratio (None when fewer than two steps could be compared)
    distinct: int  # distinct (operator, Input Dims) pairs over the compared steps
    steps: int  # steps compared


def step_shapes(m: TraceMetrics) -> StepShapes:
    """Compare the steps' shapes (module docstring)."""
    if not m.has_step_markers or len(m.steps) < 2:
        return StepShapes(None, None, 0, 0)
    sets: list[set[tuple[str, str]]] = [set() for _ in m.steps]
    for op in m.trace.ops:
        if op.name not in SHAPE_KEY_OPS:
            continue
        key = op_shape_key(op)
        if key is None:
            continue
        i = m.step_of(op.ts)
        if i is not None:
            sets[i].add((op.name, key))
    compared = [s for s in sets if s]
    if len(compared) < 2:
        return StepShapes(None, None, 0, len(compared))
    distinct = len(set().union(*compared))
    ratio = distinct / (sum(len(s) for s in compared) / len(compared))
    static = True if ratio <= STATIC_MAX else False if ratio >= CHANGING_MIN else None
    return StepShapes(static, round(ratio, 3), distinct, len(compared))
