"""What an exception leaving the user's step tells: a device mismatch (GP613), a dtype mismatch (GP614),
CUDA out of memory (GP641)."""

from __future__ import annotations

from gpuprof.capture.checks.base import Live
from gpuprof.capture.checks.memory import MemoryCheck
from gpuprof.capture.checks.placement import PlacementCheck
from gpuprof.capture.dtypes import explain_dtype_error, is_dtype_error
from gpuprof.capture.guard import safe_text
from gpuprof.capture.placement import enrich_device_error, is_device_error

__all__ = ["inspect_error"]


def inspect_error(live: Live, exc: BaseException) -> BaseException | None:
    """Record the finding the error makes; return the exception to raise instead, if any.

    A device-mismatch error becomes a :class:`~gpuprof.capture.placement.DeviceMismatchError`
    naming the module, tensor, shape and device (when building it fails, the
    original passes through); a dtype-mismatch error is explained by a GP614
    finding and passes through unchanged; an out-of-memory error dumps a
    snapshot. Never calls the exception's ``__str__`` unguarded.
    """
    g = live.guard
    if is_device_error(exc):
        placement = live.find(PlacementCheck)
        roots = placement.roots() if placement is not None else []
        made = g.run("device-mismatch report", "the original error is raised unchanged", enrich_device_error, exc,
                     roots)
        if made is None:
            return None
        err, finding = made
        live.findings.append(finding)
        return err
    if is_dtype_error(exc):
        placement = live.find(PlacementCheck)
        roots = placement.roots() if placement is not None else []
        found = g.run("dtype-mismatch report", "the error is not explained", explain_dtype_error, exc, roots)
        if found is not None:
            live.findings.append(found)
        return None  # the user's exception, unchanged
    memory = live.find(MemoryCheck)
    if memory is not None and (type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in safe_text(exc, 200)):
        found = g.run("out-of-memory report", "no out-of-memory snapshot", memory.on_oom, live, exc)
        if found is not None:
            live.findings.append(found)
    return None
